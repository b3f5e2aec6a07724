"""kujob: one command per shard, locally (:mod:`.local`) or as a Kubernetes
Indexed Job (:mod:`.k8s`)."""

from .._compat import shim

__getattr__ = shim(["tarproc.jobs.local", "tarproc.jobs.k8s"])
