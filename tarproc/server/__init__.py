"""tarserve's library: serve tar shards over HTTP, transformed on read.

* :mod:`.transform`: one shard through the stages of tarcat and tarproc, and
  the job process that writes one response;
* :mod:`.names`: which names may be served (the prefix, strict decoding);
* :mod:`.http`: the HTTP/1.1 front, one thread per connection, one job
  process per response (see its documentation for the design).

A folder of its own, not a sink: a response composes a source, stages and a
sink per request, behind a network front of its own.
"""

from .http import Server, serve
from .names import check_prefix, decode_name
from .transform import transform

__all__ = ["Server", "serve", "transform", "check_prefix", "decode_name"]
