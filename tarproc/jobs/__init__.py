"""kujob: one command per shard, locally (:mod:`.local`), as a Kubernetes
Indexed Job (:mod:`.k8s`) or as a Slurm job array (:mod:`.slurm`)."""

from .k8s import check_command_syntax, check_name, derive_name, job_manifest, kubectl_apply, manifest_json, \
    parse_env, pick_index, quantity
from .local import PLACEHOLDER, Result, Runner, Summary, check_command, check_done_template, done_path, \
    expand_ids, fill, is_done, uses_shell

__all__ = ["check_command_syntax", "check_name", "derive_name", "job_manifest", "kubectl_apply", "manifest_json",
           "parse_env", "pick_index", "quantity", "PLACEHOLDER", "Result", "Runner", "Summary", "check_command",
           "check_done_template", "done_path", "expand_ids", "fill", "is_done", "uses_shell"]
