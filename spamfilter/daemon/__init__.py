"""``spamfilter serve``: the resident filter that answers the spamd protocol.

- ``server``: the listening socket, the event loop that reads requests and
  writes replies for every connection, the scoring threads and the writer;
- ``connection``: one client's bytes in and out, without blocking;
- ``replies``: what a complete request is answered, from a ``Filter``;
- ``prefork``: more processes on one listening socket, one per core.
"""
