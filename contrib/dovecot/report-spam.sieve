# A message was copied or moved into Junk: the user says it is spam.
# `:copy` keeps the message where the user put it (without it the pipe would
# count as its delivery, and Dovecot would mark the message \Deleted).
require ["vnd.dovecot.pipe", "copy", "imapsieve", "environment", "variables"];

if environment :matches "imap.user" "*" {
  set "user" "${1}";
}
pipe :copy "spamfilter-learn" ["spam", "${user}"];
