"""kujob as a Kubernetes Indexed Job: the manifest, names and quantities, and
``kubectl apply``."""

import hashlib
import os
import re
import shutil

from ..errors import UsageError
from .local import check_done_template, expand_ids, fill, uses_shell


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_QUANTITY = re.compile(r"(\d+(\.\d+)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
MAX_INDEXED_COMPLETIONS = 100000  # Kubernetes limit with backoffLimitPerIndex


# --------------------------------------------------------------------------- ids and commands

def pick_index(ids, index):
    """The id for a 0-based completion index (``JOB_COMPLETION_INDEX``)."""
    try:
        n = int(str(index).strip())
    except ValueError:
        raise UsageError(f"bad index {index!r}: not a number") from None
    if not 0 <= n < len(ids):
        raise UsageError(f"index {n} out of range: the pattern has {len(ids)} shards (0..{len(ids) - 1})")
    return n, ids[n]


# --------------------------------------------------------------------------- Kubernetes

def check_name(name):
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise UsageError(f"bad name {name!r}: a Kubernetes Job name must be a DNS-1123 label "
                         f"(lower-case letters, digits and '-', starting and ending with a letter "
                         f"or digit, at most 63 characters)")
    return name


def derive_name(command, patterns):
    """``kujob-<program>-<hash>``: a valid DNS-1123 label from the command's
    program name and a short hash of the whole job (same job, same name)."""
    prog = os.path.basename(command[0].split()[0]) if command and command[0].split() else "job"
    word = re.sub(r"[^a-z0-9]+", "-", prog.lower()).strip("-")[:30].strip("-") or "job"
    digest = hashlib.sha1("\0".join(list(patterns) + ["--"] + list(command)).encode("utf-8", "surrogateescape"))
    return check_name(f"kujob-{word}-{digest.hexdigest()[:8]}")


def quantity(value, what):
    """A Kubernetes resource quantity: ``2``, ``500m``, ``4Gi``; sizes in
    tarproc's notation (``4GiB``, ``512MB``) are converted to bytes."""
    text = str(value).strip()
    if _QUANTITY.match(text):
        return text
    if what == "memory":
        from ..core.units import parse_size

        try:
            return str(parse_size(text))
        except UsageError:
            pass
    example = "2, 500m" if what == "cpu" else "4Gi, 512Mi, 4GiB"
    raise UsageError(f"bad --{what} {value!r} (use e.g. {example})")


def parse_env(items):
    """``["NAME=VALUE", ...]`` to Kubernetes ``env`` entries."""
    out = []
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise UsageError(f"bad --env {item!r} (use NAME=VALUE)")
        out.append({"name": name, "value": value})
    return out


def job_manifest(command, patterns, image, name=None, namespace=None, parallelism=None, cpu="1",
                 memory="2Gi", retries=0, max_failed=None, done_if=None, env=(), kujob="kujob",
                 ttl=None, retry_all=False, settings=None):
    """A self-contained ``batch/v1`` Indexed Job (a dict, ready for JSON).

    ``completions`` is the number of shards; each pod runs
    ``kujob --index-from-env -s PATTERN -- COMMAND`` so the shard pattern and
    the command travel inside the Job, and kujob maps the pod's
    ``JOB_COMPLETION_INDEX`` to its id.  ``retries`` becomes
    ``backoffLimitPerIndex`` (each shard is retried on its own, and one bad
    shard does not stop the others), except for a pod that exits 2 (the
    command's usage or bad input, which a retry cannot change: a
    ``podFailurePolicy`` rule fails that index at once) unless ``retry_all``;
    ``max_failed`` becomes
    ``maxFailedIndexes`` (fail the whole Job early)."""
    if isinstance(patterns, str):
        patterns = [patterns]
    ids = expand_ids(patterns, settings)
    check_command_syntax(command)
    if uses_shell(command):  # refuse here what every pod would refuse
        for shard_id in ids:
            fill(command, shard_id)
    if done_if:
        check_done_template(done_if, len(ids), settings)
    if not image:
        raise UsageError("--k8s needs --image IMAGE (an image with tarproc and your command installed)")
    n = len(ids)
    if n > MAX_INDEXED_COMPLETIONS:
        raise UsageError(f"{n} shards: Kubernetes allows at most {MAX_INDEXED_COMPLETIONS} completions "
                         f"for an Indexed Job with per-index retries; split the pattern into several jobs")
    name = check_name(name) if name else derive_name(command, patterns)
    if namespace is not None:
        check_name(namespace)
    if parallelism is None:
        parallelism = min(n, 100)
    if int(parallelism) < 1:
        raise UsageError(f"bad --parallelism {parallelism}: must be at least 1")
    if int(retries) < 0:
        raise UsageError(f"bad --retries {retries}: must be 0 or more")
    args = ["--index-from-env"]
    for p in patterns:
        args += ["-s", p]
    if done_if:
        args += ["--done-if", done_if]
    args += ["-v", "--"] + list(command)
    resources = {}
    if cpu is not None:
        resources.setdefault("requests", {})["cpu"] = quantity(cpu, "cpu")
        resources.setdefault("limits", {})["cpu"] = quantity(cpu, "cpu")
    if memory is not None:
        resources.setdefault("requests", {})["memory"] = quantity(memory, "memory")
        resources.setdefault("limits", {})["memory"] = quantity(memory, "memory")
    container = {"name": "shard", "image": _utf8(image), "command": [_literal(kujob)], "args": [_literal(a) for a in args]}
    env_list = parse_env(env)
    if env_list:
        container["env"] = [{"name": e["name"], "value": _literal(e["value"])} for e in env_list]
    if resources:
        container["resources"] = resources
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "kujob"}
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = labels
    spec = {
        "completions": n,
        "parallelism": min(int(parallelism), n),
        "completionMode": "Indexed",
        "backoffLimitPerIndex": int(retries),
    }
    if int(retries) > 0 and not retry_all:
        spec["podFailurePolicy"] = {"rules": [{"action": "FailIndex", "onExitCodes": {
            "containerName": "shard", "operator": "In", "values": [2]}}]}
    if max_failed is not None:
        if not 0 <= int(max_failed) <= n:
            raise UsageError(f"bad --max-failed {max_failed}: must be between 0 and the number of shards ({n})")
        spec["maxFailedIndexes"] = int(max_failed)
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = int(ttl)
    spec["template"] = {
        "metadata": {"labels": dict(labels)},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def _literal(text):
    """``text`` as Kubernetes passes it on: in a container's command, args
    and env values it expands ``$(NAME)`` and reduces ``$$`` to ``$``, so
    every ``$`` is doubled (the pod gets exactly what was typed here).  The
    manifest is JSON, which holds only Unicode: a name that is not UTF-8
    would reach the pod changed, so it is refused."""
    return _utf8(text).replace("$", "$$")


def _utf8(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{text.encode('utf-8', 'surrogateescape')!r} is not UTF-8: a Kubernetes "
                         f"manifest cannot carry it") from None
    return text


def check_command_syntax(command):
    """Like :func:`check_command` without looking at PATH (the command runs
    in a container image, not here)."""
    if not command:
        raise UsageError("no command: put it after '--', e.g. kujob -s '{0..9}' -- tarcat in-{}.tar -o out-{}.tar")


def manifest_json(manifest):
    import json

    return json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"


def kubectl_apply(manifest_text, kubectl=None):
    """Pipe a manifest to ``kubectl apply -f -``; returns kubectl's exit code.
    ``kubectl`` names another kubectl (e.g. ``kubectl --context prod``:
    ``KUJOB_KUBECTL`` at the command line).  kubectl runs as a
    :class:`~tarproc.runtime.child.Child` (its own process group, killed
    with us; its messages and its ``job.batch/NAME created`` reach our
    stderr and stdout as they are)."""
    import shlex

    from ..runtime.child import Child

    words = shlex.split(kubectl or "kubectl")
    if not words or shutil.which(words[0]) is None:
        raise UsageError(f"--apply needs {words[0] if words else 'kubectl'}, which is not on PATH: install "
                         f"kubectl, or save the manifest with 'kujob --k8s ... > job.json' and apply it "
                         f"where kubectl is (kubectl apply -f job.json)")
    child = Child(words + ["apply", "-f", "-"], "kubectl apply", stdin="pipe", stdout="inherit", stderr="inherit")
    child.communicate(manifest_text.encode("utf-8"))
    return child.returncode
