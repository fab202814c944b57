# A message was copied or moved out of Junk: the user says it is ham, unless
# it went to the trash (deleting spam says nothing about it) or was copied
# within Junk.
# `:copy` keeps the message where the user put it (see report-spam.sieve).
require ["vnd.dovecot.pipe", "copy", "imapsieve", "environment", "variables"];

if environment :is "imap.mailbox" ["Trash", "Junk"] {
  stop;
}
if environment :matches "imap.user" "*" {
  set "user" "${1}";
}
pipe :copy "spamfilter-learn" ["ham", "${user}"];
