"""The resident filters: ``spamfilter serve`` (the spamd protocol, for spamc)
and ``spamfilter milter`` (the milter protocol, for Postfix and Sendmail).

- ``pool``: the open filters, one per model, and which model answers;
- ``listen``: where a daemon listens and who may connect;
- ``server``: serve's event loop over every connection, its scoring threads
  and its writer; ``connection``: one client's bytes in and out;
  ``replies``: what a spamd request is answered;
- ``milter``: the milter protocol (standard library only);
  ``milter_server``: the milter, a thread per MTA connection;
- ``prefork``: either daemon in one process per core on one socket.
"""
