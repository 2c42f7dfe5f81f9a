"""What the planner tests share: `meshtrain plan --json` and `meshtrain train` on the same keys."""
import json
import os
import subprocess


def plan_json(meshtrain, ranks, keys):
    """plan --json's object, or the reason it failed (a str)."""
    plan = subprocess.run([meshtrain, "plan", "--world", str(ranks), "--json"] + keys, capture_output=True, text=True)
    if plan.returncode != 0:
        return f"plan exited {plan.returncode}: {plan.stderr.strip()}"
    return json.loads(plan.stdout)


def train(mpiexec, meshtrain, ranks, keys, timeout=300):
    """None when `train` under mpiexec succeeded, else the reason it failed."""
    run = subprocess.run([mpiexec, "-n", str(ranks), meshtrain, "train"] + keys, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=timeout)
    if run.returncode != 0:
        return f"train exited {run.returncode}: {run.stderr.strip()[-800:]}"
    return None


def case_keys(workdir, name, shard):
    """A fresh directory for case `name` and the keys that put its data and checkpoints there."""
    work = os.path.join(workdir, name)
    os.makedirs(work)
    return work, ["--data.train", shard, "--checkpoint.dir", os.path.join(work, "ck"), "--checkpoint.resume", "never"]
