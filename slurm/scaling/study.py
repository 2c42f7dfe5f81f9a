#!/usr/bin/python3
"""Scaling studies: does doubling the ranks help this job, and with which layout?

usage: slurm/scaling/study.py submit SPEC [--local | --dry-run] [--meshtrain BIN] [--mpiexec MPIEXEC] [--force]
       slurm/scaling/study.py collect DIR [--no-plot] [--plot-json FILE]

`submit` reads one spec file (INI or JSON: a model config, rank counts, layouts, strong or weak
scaling, steps; format in share/docs/usage.md, "Scaling studies"), asks `meshtrain plan` about every
(rank count, layout) point, skips with the planner's reason those the trainer would refuse or that
do not fit, and writes the study directory:

    DIR/study.json              the resolved study: every point, the skipped ones with their reason
    DIR/points.tsv              index, ranks, directory: what each array task reads
    DIR/sbatch.sh               the sbatch commands (one job array per rank count)
    DIR/points/<point>/         train.args, plan.args (one argument per line); after the run:
                                plan.json, stdout.log, metrics.jsonl, checkpoints/, exit_code, task.txt

It then submits slurm/scaling/point.sbatch as one job array per rank count (a job array has one
allocation size; the array indices are the points' global indices), or with --local runs the same
script for each point in turn with `mpiexec -n R` instead of `srun -n R`. --dry-run writes
everything and prints the sbatch commands without submitting.

`collect` reads a study directory and writes DIR/scaling.csv (columns in usage.md) and, through
share/plot/plot_scaling.py, DIR/scaling_throughput.png and DIR/scaling_breakdown.png.
"""
import argparse
import configparser
import csv
import datetime
import glob
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import trainer_output  # noqa: E402

POINT_SCRIPT = os.path.join(HERE, "point.sbatch")
PLOT_SCRIPT = os.path.join(ROOT, "share", "plot", "plot_scaling.py")

STUDY_KEYS = {"name", "config", "ranks", "layouts", "scaling", "global_batch", "global_batch_per_dp", "micro_batch",
              "steps", "warmup", "out", "data", "meshtrain"}
SLURM_KEYS = {"partition", "account", "time", "ranks_per_node", "cpus_per_task", "launcher", "options", "job_name"}
SECTIONS = {"study", "keys", "plan", "slurm"}
# Train keys that each point sets itself; a study names them in [study] (or not at all).
POINT_KEYS = {"parallel.dp", "parallel.tp", "parallel.pp", "parallel.ep", "train.global_batch", "train.micro_batch", "train.steps",
              "data.train", "checkpoint.dir", "checkpoint.resume", "checkpoint.every", "checkpoint.keep",
              "log.metrics", "log.timing_every"}
LAYOUT_SEPARATORS = r"[·.*]"

CSV_COLUMNS = [
    "point", "status", "ranks", "layout", "dp", "tp", "pp", "ep", "zero", "schedule", "micro_batch", "accum",
    "global_batch", "tokens_per_step", "steps_measured", "step_time_s", "tokens_per_s", "tokens_per_s_per_rank",
    "speedup", "efficiency", "compute_s", "comm_s", "all_to_all_s", "idle_s", "comm_fraction", "all_to_all_fraction",
    "bubble_fraction", "peak_rss_bytes",
    "predicted_step_time_s", "predicted_tokens_per_s", "predicted_comm_fraction", "predicted_all_to_all_fraction",
    "predicted_bubble_fraction",
    "predicted_peak_rss_bytes",
]


class SpecError(Exception):
    """Bad input in a spec file: the message names the key and what would be valid."""


# --- the spec ------------------------------------------------------------------------------------

def read_spec_file(path):
    """{section: {key: str or list}} from an INI or JSON file (JSON: an object of the same sections)."""
    with open(path) as f:
        text = f.read()
    if path.endswith(".json") or text.lstrip().startswith("{"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path}: not valid JSON: {e}")
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            raise SpecError(f"{path}: a JSON spec is an object of sections, each an object of keys")

        def text(v):  # as an INI file would spell it
            return "true" if v is True else "false" if v is False else v if isinstance(v, list) else str(v)
        return {s: {k: text(v) for k, v in keys.items()} for s, keys in raw.items()}
    ini = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None)
    ini.optionxform = str  # keys are case-sensitive, as meshtrain's
    try:
        ini.read_string(text, source=path)
    except configparser.Error as e:
        raise SpecError(f"{path}: {e}")
    return {s: dict(ini[s]) for s in ini.sections()}


def as_list(value, split=r"[,\s]+"):
    if isinstance(value, list):
        return [str(v).strip() for v in value]
    return [v for v in (x.strip() for x in re.split(split, str(value))) if v]


def as_int(section, key, value, minimum=None):
    try:
        n = int(str(value).strip())
    except ValueError:
        raise SpecError(f"[{section}] {key} = {value!r}: expected a whole number")
    if minimum is not None and n < minimum:
        raise SpecError(f"[{section}] {key} = {n}: must be at least {minimum}")
    return n


def parse_layout(name):
    """A layout name — terms joined by `·`, `.` or `*`: dp, tp, pp (bare: all ranks the others leave;
    with a number: that degree), epN (expert parallelism: a factor of dp, not of the ranks), zeroN,
    gpipe or 1f1b — as {dp, tp, pp: int, "rest" or None, ep, zero, schedule}. Unnamed degrees are 1,
    except dp, which takes the ranks left when no term is bare."""
    layout = {"dp": None, "tp": None, "pp": None, "ep": None, "zero": None, "schedule": None}
    terms = [t.strip() for t in re.split(LAYOUT_SEPARATORS, name)]
    for term in terms:
        m = re.fullmatch(r"(dp|tp|pp|ep|zero)(\d*)|(gpipe|1f1b)", term)
        if not m:
            raise SpecError(f"layout {name!r}: {term!r} is not dp, dpN, tp, tpN, pp, ppN, epN, zeroN, gpipe or 1f1b")
        what = m.group(1) or "schedule"
        if layout[what] is not None:
            raise SpecError(f"layout {name!r}: {what} is given twice")
        if m.group(3):
            layout["schedule"] = m.group(3)
        elif m.group(2) == "":
            if what == "zero":
                raise SpecError(f"layout {name!r}: zero needs its stage (zero1, zero2, zero3)")
            if what == "ep":
                raise SpecError(f"layout {name!r}: ep needs its degree (ep2, ep4, …): it splits each dp group, "
                                "it takes no ranks of its own")
            layout[what] = "rest"
        else:
            n = int(m.group(2))
            if n < 1 and what != "zero":
                raise SpecError(f"layout {name!r}: {term} must be at least {what}1")
            layout[what] = n
    if sum(layout[k] == "rest" for k in ("dp", "tp", "pp")) > 1:
        raise SpecError(f"layout {name!r}: at most one of dp, tp, pp may be bare (it takes the ranks left)")
    return layout


def resolve_layout(layout, ranks):
    """(dp, tp, pp) of a parsed layout on `ranks` ranks, or a string saying why it cannot be."""
    degrees = {k: layout[k] for k in ("dp", "tp", "pp")}
    rest = [k for k, v in degrees.items() if v == "rest"]
    if not rest and degrees["dp"] is None:
        rest = ["dp"]
    fixed = math.prod(v for v in degrees.values() if isinstance(v, int))
    if rest:
        if ranks % fixed:
            named = "·".join(f"{k}{v}" for k, v in degrees.items() if isinstance(v, int))
            return f"{plural(ranks, 'rank')} {'is' if ranks == 1 else 'are'} not a multiple of {named} = {fixed}"
        degrees[rest[0]] = ranks // fixed
    elif fixed != ranks:
        return f"the layout needs {fixed} ranks"
    return tuple(degrees[k] or 1 for k in ("dp", "tp", "pp"))


def load_spec(path):
    """The study a spec file describes, every path absolute."""
    path = os.path.abspath(path)
    base = os.path.dirname(path)
    raw = read_spec_file(path)
    unknown = set(raw) - SECTIONS
    if unknown:
        raise SpecError(f"{path}: unknown section(s) {sorted(unknown)} (valid: {sorted(SECTIONS)})")
    study = raw.get("study")
    if not study:
        raise SpecError(f"{path}: no [study] section")
    bad = set(study) - STUDY_KEYS
    if bad:
        raise SpecError(f"[study] unknown key(s) {sorted(bad)} (valid: {sorted(STUDY_KEYS)})")
    for key in ("ranks", "layouts", "out"):
        if key not in study:
            raise SpecError(f"[study] {key} is required")

    def relative(value):
        return os.path.normpath(os.path.join(base, os.path.expanduser(str(value))))

    spec = {"path": path, "name": str(study.get("name", os.path.splitext(os.path.basename(path))[0]))}
    spec["config"] = relative(study["config"]) if study.get("config") else None
    if spec["config"] and not os.path.isfile(spec["config"]):
        raise SpecError(f"[study] config = {study['config']}: no such file ({spec['config']})")
    spec["ranks"] = [as_int("study", "ranks", r, 1) for r in as_list(study["ranks"])]
    if not spec["ranks"]:
        raise SpecError("[study] ranks is empty")
    names = as_list(study["layouts"], split=",")
    if not names:
        raise SpecError("[study] layouts is empty")
    spec["layouts"] = [(n, parse_layout(n)) for n in names]
    spec["scaling"] = str(study.get("scaling", "strong")).strip()
    if spec["scaling"] not in ("strong", "weak"):
        raise SpecError(f"[study] scaling = {spec['scaling']!r}: expected strong or weak")
    if spec["scaling"] == "strong":
        if "global_batch_per_dp" in study:
            raise SpecError("[study] global_batch_per_dp is for weak scaling; strong scaling takes global_batch")
        spec["global_batch"] = as_int("study", "global_batch", study["global_batch"], 1) \
            if "global_batch" in study else None
    else:
        if "global_batch" in study:
            raise SpecError("[study] weak scaling grows the global batch with dp: give global_batch_per_dp")
        if "global_batch_per_dp" not in study:
            raise SpecError("[study] weak scaling needs global_batch_per_dp (sequences per data-parallel rank)")
        spec["global_batch_per_dp"] = as_int("study", "global_batch_per_dp", study["global_batch_per_dp"], 1)
    spec["micro_batch"] = as_int("study", "micro_batch", study["micro_batch"], 1) if "micro_batch" in study else None
    spec["steps"] = as_int("study", "steps", study.get("steps", 20), 1)
    spec["warmup"] = as_int("study", "warmup", study.get("warmup", 2), 0)
    if spec["warmup"] >= spec["steps"]:
        raise SpecError(f"[study] warmup = {spec['warmup']} leaves no step of steps = {spec['steps']} to measure")
    spec["out"] = relative(study["out"])
    spec["data"] = relative(study["data"]) if study.get("data") else None
    spec["meshtrain"] = relative(study["meshtrain"]) if study.get("meshtrain") else None

    keys = {str(k): str(v) for k, v in raw.get("keys", {}).items()}
    for k in keys:
        if k in POINT_KEYS:
            raise SpecError(f"[keys] {k}: every point sets it (steps, batches, data and layout are [study] keys)")
        if "." not in k:
            raise SpecError(f"[keys] {k}: expected section.key, e.g. model.layers")
    spec["keys"] = keys
    spec["plan"] = {str(k): str(v) for k, v in raw.get("plan", {}).items()}
    slurm = {str(k): v for k, v in raw.get("slurm", {}).items()}
    bad = set(slurm) - SLURM_KEYS
    if bad:
        raise SpecError(f"[slurm] unknown key(s) {sorted(bad)} (valid: {sorted(SLURM_KEYS)})")
    if "ranks_per_node" in slurm:
        slurm["ranks_per_node"] = as_int("slurm", "ranks_per_node", slurm["ranks_per_node"], 1)
    spec["slurm"] = slurm
    for values in (keys.values(), spec["plan"].values()):
        if any("\n" in v for v in values):
            raise SpecError("a key's value holds a line break")
    return spec


def config_data_path(config):
    """The config file's data.train made absolute as the trainer would read it from this directory."""
    if not config:
        return None
    ini = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None)
    ini.read(config)
    value = ini.get("data", "train", fallback=None)
    return os.path.abspath(value) if value else None


def study_data(spec):
    return spec["data"] or config_data_path(spec["config"])


def plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


# --- submit ---------------------------------------------------------------------------------------

def point_keys(spec, dp, tp, pp, layout):
    """The train keys of one point: config, spec keys, then what the point itself sets."""
    keys = ["--config", spec["config"]] if spec["config"] else []
    for k, v in spec["keys"].items():
        keys += [f"--{k}", v]
    keys += ["--parallel.dp", str(dp), "--parallel.tp", str(tp), "--parallel.pp", str(pp),
             "--parallel.ep", str(layout["ep"] or 1)]
    if layout["zero"] is not None:
        keys += ["--parallel.zero", str(layout["zero"])]
    if layout["schedule"]:
        keys += ["--parallel.schedule", layout["schedule"]]
    if spec["micro_batch"]:
        keys += ["--train.micro_batch", str(spec["micro_batch"])]
    if spec["scaling"] == "weak":
        keys += ["--train.global_batch", str(spec["global_batch_per_dp"] * dp)]
    elif spec["global_batch"]:
        keys += ["--train.global_batch", str(spec["global_batch"])]
    keys += ["--train.steps", str(spec["steps"])]
    data = study_data(spec)
    if data:
        keys += ["--data.train", data]
    return keys


def plan_options(spec):
    options = []
    for k, v in spec["plan"].items():
        options += [f"--{k.replace('_', '-')}", v]
    rpn = spec["slurm"].get("ranks_per_node")
    if rpn and not any(k.replace("_", "-") == "ranks-per-node" for k in spec["plan"]):
        options += ["--ranks-per-node", str(rpn)]
    return options


def slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


def plan_points(spec, binary):
    """(points, skipped): every (ranks, layout) the planner accepts and fits, and why the others not."""
    points, skipped = [], []
    options = plan_options(spec)
    for ranks in spec["ranks"]:
        for name, layout in spec["layouts"]:
            degrees = resolve_layout(layout, ranks)
            if isinstance(degrees, str):
                skipped.append({"ranks": ranks, "layout": name, "reason": degrees})
                continue
            dp, tp, pp = degrees
            keys = point_keys(spec, dp, tp, pp, layout)
            proc = subprocess.run(trainer_output.plan_command(binary, ranks, keys, options), capture_output=True,
                                  text=True)
            if proc.returncode == 2:
                reason = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "refused"
                skipped.append({"ranks": ranks, "layout": name,
                                "reason": re.sub(r"^meshtrain plan: error: ", "", reason)})
                continue
            if proc.returncode != 0:
                sys.exit(f"study.py: `{shlex.join(trainer_output.plan_command(binary, ranks, keys, options))}` "
                         f"failed with exit {proc.returncode}:\n{proc.stderr}")
            plan = json.loads(proc.stdout)
            if not plan["fits"]:
                skipped.append({"ranks": ranks, "layout": name, "reason":
                                f"does not fit: needs {plan['needed_bytes'] / 2**30:.2f} GiB of "
                                f"{plan['capacity_bytes'] / 2**30:.2f} GiB (rank {plan['limiting_rank']})"})
                continue
            batch = plan["effective_batch"]
            index = len(points)
            points.append({
                "index": index, "dir": os.path.join("points", f"{index:02d}-r{ranks}-{slug(name)}"),
                "ranks": ranks, "layout": name, "dp": dp, "tp": tp, "pp": pp, "ep": layout["ep"] or 1,
                "zero": plan["layout"]["zero"], "schedule": plan["layout"]["schedule"],
                "micro_batch": batch["micro_batch"], "accum": batch["accum"], "global_batch": batch["sequences"],
                "tokens_per_step": batch["tokens"], "keys": keys, "plan_options": options,
            })
    return points, skipped


def write_study(spec, binary, points, skipped, out):
    os.makedirs(os.path.join(out, "points"), exist_ok=True)
    os.makedirs(os.path.join(out, "slurm"), exist_ok=True)
    with open(os.path.join(out, "points.tsv"), "w") as f:
        f.write("# index\tranks\tdirectory (relative to this file): read by point.sbatch\n")
        for p in points:
            f.write(f"{p['index']}\t{p['ranks']}\t{p['dir']}\n")
    for p in points:
        pdir = os.path.join(out, p["dir"])
        os.makedirs(pdir, exist_ok=True)
        train = p["keys"] + ["--checkpoint.dir", os.path.join(pdir, "checkpoints"), "--checkpoint.resume", "never",
                             "--checkpoint.every", "0", "--checkpoint.keep", "1",
                             "--log.metrics", os.path.join(pdir, "metrics.jsonl"),
                             # a table per warm-up's worth of steps: the first covers the warm-up alone
                             "--log.timing_every", str(spec["warmup"])]
        with open(os.path.join(pdir, "train.args"), "w") as f:
            f.write("\n".join(train) + "\n")
        with open(os.path.join(pdir, "plan.args"), "w") as f:
            f.write("\n".join(["--world", str(p["ranks"]), "--json"] + p["plan_options"] + train) + "\n")
    study = {
        "name": spec["name"], "spec": spec["path"], "scaling": spec["scaling"], "steps": spec["steps"],
        "warmup": spec["warmup"], "meshtrain": binary,
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "points": [{k: v for k, v in p.items() if k not in ("keys", "plan_options")} for p in points],
        "skipped": skipped,
    }
    with open(os.path.join(out, "study.json"), "w") as f:
        json.dump(study, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return study


def sbatch_commands(spec, binary, points, out):
    """One `sbatch --array` per rank count: a job array's tasks share one allocation size."""
    slurm = spec["slurm"]
    job = slurm.get("job_name", f"scaling-{slug(spec['name'])}")
    commands = []
    for ranks in sorted({p["ranks"] for p in points}):
        indices = [str(p["index"]) for p in points if p["ranks"] == ranks]
        cmd = ["sbatch", "--parsable", f"--job-name={job}-r{ranks}", f"--array={','.join(indices)}",
               f"--ntasks={ranks}", f"--output={os.path.join(out, 'slurm', '%A_%a.out')}"]
        rpn = slurm.get("ranks_per_node")
        if rpn:
            cmd += [f"--nodes={-(-ranks // rpn)}", f"--ntasks-per-node={min(ranks, rpn)}"]
        for key in ("partition", "account", "time", "cpus_per_task"):
            if key in slurm:
                cmd.append(f"--{key.replace('_', '-')}={slurm[key]}")
        cmd += shlex.split(str(slurm.get("options", "")))
        cmd += [POINT_SCRIPT, "--launcher", str(slurm.get("launcher", "srun")), out, binary]
        commands.append((ranks, indices, cmd))
    return commands


def find_meshtrain(option, spec):
    given = option or spec["meshtrain"]
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            sys.exit(f"study.py: meshtrain binary {given} does not exist or is not executable")
        return os.path.abspath(given)
    for candidate in (os.path.join(ROOT, "build", "release", "bin", "meshtrain"), shutil.which("meshtrain")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    sys.exit("study.py: no meshtrain binary: pass --meshtrain, set [study] meshtrain, or build build/release")


def clear_previous(out, force):
    if not os.path.exists(os.path.join(out, "study.json")):
        return
    if not force:
        sys.exit(f"study.py: {out} already holds a study (study.json); pass --force to replace it")
    for name in ("points", "slurm"):
        shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    for name in ("study.json", "points.tsv", "sbatch.sh", "scaling.csv", "scaling_throughput.png",
                 "scaling_breakdown.png"):
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))


def run_local(study, binary, out, mpiexec):
    """Every point in turn through point.sbatch with mpiexec as the launcher; the number that failed."""
    failed = 0
    for p in study["points"]:
        start = time.monotonic()
        proc = subprocess.run(["bash", POINT_SCRIPT, "--index", str(p["index"]), "--launcher", mpiexec, out, binary],
                              stdin=subprocess.DEVNULL)
        took = time.monotonic() - start
        state = "ok" if proc.returncode == 0 else f"exit {proc.returncode}, see {p['dir']}/stdout.log"
        print(f"[{p['index'] + 1}/{len(study['points'])}] {plural(p['ranks'], 'rank')}, {p['layout']}: "
              f"{took:.1f} s, {state}", flush=True)
        failed += proc.returncode != 0
    return failed


def submit(args):
    try:
        spec = load_spec(args.spec)
    except SpecError as e:
        print(f"study.py: {args.spec}: {e}", file=sys.stderr)
        return 2
    binary = find_meshtrain(args.meshtrain, spec)
    data = study_data(spec)
    if data and not glob.glob(data):
        print(f"study.py: {args.spec}: the training data {data} does not exist (no point could run)", file=sys.stderr)
        return 2
    out = spec["out"]
    clear_previous(out, args.force)
    points, skipped = plan_points(spec, binary)
    for s in skipped:
        print(f"skip {plural(s['ranks'], 'rank')}, {s['layout']}: {s['reason']}")
    if not points:
        print("study.py: no point left to run", file=sys.stderr)
        return 2
    study = write_study(spec, binary, points, skipped, out)
    print(f"{len(points)} point(s) of study {spec['name']!r} ({spec['scaling']} scaling) in {out}")
    for p in points:
        experts = f" (ep {p['ep']})" if p["ep"] > 1 else ""
        print(f"  {p['index']:>3}  {plural(p['ranks'], 'rank'):>8}  {p['layout']:<14} "
              f"dp {p['dp']}{experts} tp {p['tp']} pp {p['pp']}  micro_batch {p['micro_batch']} × dp {p['dp']} × accum {p['accum']} = {p['global_batch']} sequences")
    commands = sbatch_commands(spec, binary, points, out)
    with open(os.path.join(out, "sbatch.sh"), "w") as f:
        f.write("#!/usr/bin/env bash\n# The job arrays of this study, one per rank count (study.py submit).\n"
                "set -euo pipefail\n")
        for _, _, cmd in commands:
            f.write(shlex.join(cmd) + "\n")
    collect_hint = f"then: {sys.argv[0]} collect {out}"
    if args.local:
        mpiexec = args.mpiexec or shutil.which("mpiexec")
        if not mpiexec:
            sys.exit("study.py: --local needs mpiexec on PATH or --mpiexec")
        failed = run_local(study, binary, out, mpiexec)
        print(f"{len(points) - failed} of {len(points)} point(s) ran; {collect_hint}")
        return 1 if failed else 0
    if args.dry_run:
        for _, _, cmd in commands:
            print(shlex.join(cmd))
        print(f"(dry run: nothing submitted; {os.path.join(out, 'sbatch.sh')} holds these commands)")
        return 0
    jobs = []
    for ranks, indices, cmd in commands:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"study.py: sbatch failed for {plural(ranks, 'rank')}: {proc.stderr.strip()}", file=sys.stderr)
            return 1
        job_id = proc.stdout.strip().split(";")[0]
        jobs.append({"ranks": ranks, "array": ",".join(indices), "job_id": job_id})
        print(f"submitted job array {job_id} ({plural(ranks, 'rank')}, points {','.join(indices)})")
    study["jobs"] = jobs
    with open(os.path.join(out, "study.json"), "w") as f:
        json.dump(study, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"when they have finished ({'squeue -j ' + ','.join(j['job_id'] for j in jobs)} lists none), "
          f"{collect_hint}")
    return 0


# --- collect --------------------------------------------------------------------------------------

def read_exit_code(pdir):
    try:
        with open(os.path.join(pdir, "exit_code")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


# (timing-table row, CSV column) of the measured breakdown, in the order the plot stacks them.
BREAKDOWN = (("compute", "compute_s"), ("communication", "comm_s"), (trainer_output.ALL_TO_ALL, "all_to_all_s"),
             ("idle", "idle_s"))


def time_breakdown(tables):
    """Seconds per step of each BREAKDOWN column and the shares of the step, from the timing tables
    of the counted steps: each table is one window of steps, so its medians over ranks are weighted
    by the steps it covers. A table without an all-to-all row had none that took time: 0."""
    weights = [t["last"] - t["first"] + 1 for t in tables]
    none = {"median": 0.0}
    row = {column: sum(w * t.get(kind, none)["median"] for w, t in zip(weights, tables)) / sum(weights)
           for kind, column in BREAKDOWN}
    total = sum(row.values())
    if total > 0:
        row["comm_fraction"] = row["comm_s"] / total
        row["all_to_all_fraction"] = row["all_to_all_s"] / total
        row["bubble_fraction"] = row["idle_s"] / total
    return row


def measure_point(study, point, pdir):
    """The CSV row of one point: measured figures from its metrics and stdout, predicted from plan.json."""
    row = {k: point[k] for k in ("ranks", "layout", "dp", "tp", "pp", "zero", "schedule", "micro_batch", "accum",
                                 "global_batch", "tokens_per_step")}
    row["ep"] = point.get("ep", 1)  # a study submitted before layouts had ep
    row["point"] = os.path.basename(point["dir"])
    code = read_exit_code(pdir)
    metrics_path = os.path.join(pdir, "metrics.jsonl")
    records = trainer_output.read_metrics(metrics_path) if os.path.exists(metrics_path) else []
    counted = trainer_output.after_warmup(records, study["warmup"])
    if code is None:
        # point.sbatch writes exit_code last: without it the task never ran, is running, or was killed
        row["status"] = "unfinished" if records else "not run"
    elif code != 0:
        row["status"] = f"exit {code}"
    elif not counted:
        row["status"] = "no step after warm-up"
    else:
        row["status"] = "ok"
    if counted:
        row["steps_measured"] = len(counted)
        row["step_time_s"] = trainer_output.median_after_warmup(records, "step_time_s", study["warmup"])
        row["tokens_per_s"] = trainer_output.median_after_warmup(records, "tokens_per_s", study["warmup"])
        row["tokens_per_s_per_rank"] = row["tokens_per_s"] / point["ranks"]
        rss = [r["memory"]["peak_rss"] for r in records if "peak_rss" in r.get("memory", {})]
        if rss:
            row["peak_rss_bytes"] = max(rss)
    stdout_path = os.path.join(pdir, "stdout.log")
    if os.path.exists(stdout_path):
        with open(stdout_path, errors="replace") as f:
            tables = [t for t in trainer_output.timing_tables(f.read()) if t["first"] > study["warmup"]]
        if tables:
            row.update(time_breakdown(tables))
    plan_path = os.path.join(pdir, "plan.json")
    if os.path.exists(plan_path) and os.path.getsize(plan_path) > 0:
        with open(plan_path) as f:
            plan = json.load(f)
        st = plan["step_time"]
        row["predicted_step_time_s"] = st["total_s"]
        row["predicted_tokens_per_s"] = plan["tokens_per_s"]
        if st["total_s"] > 0:
            row["predicted_comm_fraction"] = (st["tp_comm_s"] + st["pp_comm_s"] + st["dp_comm_s"]) / st["total_s"]
            row["predicted_all_to_all_fraction"] = st.get("ep_comm_s", 0.0) / st["total_s"]
            row["predicted_bubble_fraction"] = st["bubble_s"] / st["total_s"]
        row["predicted_peak_rss_bytes"] = plan["per_rank"][0]["peak_rss"]
    return row


def add_efficiency(rows):
    """Speedup and efficiency of every ok row against the baseline: the fastest ok point among those
    with the fewest ranks. Efficiency = (tokens/s per rank) / (baseline's tokens/s per rank), which
    is speedup / rank ratio (strong scaling) and the per-rank throughput ratio (weak scaling)."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return None
    fewest = min(r["ranks"] for r in ok)
    base = max((r for r in ok if r["ranks"] == fewest), key=lambda r: r["tokens_per_s"])
    for r in ok:
        r["speedup"] = r["tokens_per_s"] / base["tokens_per_s"]
        r["efficiency"] = r["tokens_per_s_per_rank"] / base["tokens_per_s_per_rank"]
    return base


def cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back as the same double
    return str(value)


def collect(args):
    out = os.path.abspath(args.dir)
    try:
        with open(os.path.join(out, "study.json")) as f:
            study = json.load(f)
    except OSError as e:
        print(f"study.py: {out} is not a study directory (no study.json: {e.strerror})", file=sys.stderr)
        return 2
    rows = [measure_point(study, p, os.path.join(out, p["dir"])) for p in study["points"]]
    base = add_efficiency(rows)
    csv_path = os.path.join(out, "scaling.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            w.writerow([cell(r.get(c)) for c in CSV_COLUMNS])
    print(f"study {study['name']!r}, {study['scaling']} scaling, medians of steps {study['warmup'] + 1}–"
          f"{study['steps']}")
    print(f"{'ranks':>5} {'layout':<14} {'batch':>6} {'step s':>8} {'pred s':>8} {'tok/s':>9} {'tok/s/rank':>10} "
          f"{'eff':>5} {'comm':>5} {'a2a':>5} {'bubble':>6} {'rss MiB':>8} {'pred':>7}  status")

    def fmt(value, spec, scale=1.0):
        return format(value * scale, spec) if value is not None else "-"
    for r in rows:
        print(f"{r['ranks']:>5} {r['layout']:<14} {r['global_batch']:>6} {fmt(r.get('step_time_s'), '8.4f')} "
              f"{fmt(r.get('predicted_step_time_s'), '8.4f')} {fmt(r.get('tokens_per_s'), '9.0f')} "
              f"{fmt(r.get('tokens_per_s_per_rank'), '10.0f')} {fmt(r.get('efficiency'), '5.2f')} "
              f"{fmt(r.get('comm_fraction'), '5.0%')} {fmt(r.get('all_to_all_fraction'), '5.0%')} "
              f"{fmt(r.get('bubble_fraction'), '6.0%')} "
              f"{fmt(r.get('peak_rss_bytes'), '8.1f', 2**-20)} {fmt(r.get('predicted_peak_rss_bytes'), '7.1f', 2**-20)}"
              f"  {r['status']}")
    for s in study.get("skipped", []):
        print(f"(skipped at submit: {plural(s['ranks'], 'rank')}, {s['layout']}: {s['reason']})")
    if base:
        print(f"efficiency against {base['point']} ({plural(base['ranks'], 'rank')}, {base['layout']}, "
              f"{base['tokens_per_s']:.0f} tokens/s)")
    print(f"wrote {csv_path}")
    failed = sum(r["status"] != "ok" for r in rows)
    if args.no_plot:
        return 1 if failed else 0
    title = f"{study['name']}: {study['scaling']} scaling"
    plot = [sys.executable, PLOT_SCRIPT, csv_path, "--out-dir", out, "--title", title]
    proc = subprocess.run(plot + (["--dump-json", args.plot_json] if args.plot_json else []))
    if proc.returncode != 0:
        print(f"study.py: plotting failed (exit {proc.returncode}); the CSV is written", file=sys.stderr)
        return 1
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("submit", help="plan, write and submit (or run --local) every point of a spec")
    s.add_argument("spec", help="the study's spec file (INI or JSON)")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--local", action="store_true", help="run the points one after another with mpiexec here")
    mode.add_argument("--dry-run", action="store_true", help="write the study and print the sbatch commands only")
    s.add_argument("--meshtrain", help="the meshtrain binary (default: [study] meshtrain, build/release, PATH)")
    s.add_argument("--mpiexec", help="--local: the mpiexec to start ranks with (default: PATH)")
    s.add_argument("--force", action="store_true", help="replace a study already in the output directory")
    c = sub.add_parser("collect", help="write scaling.csv and the plots of a study directory")
    c.add_argument("dir")
    c.add_argument("--no-plot", action="store_true", help="write the CSV only")
    c.add_argument("--plot-json", help="also write the plotted series to this file (plot_scaling.py --dump-json)")
    args = ap.parse_args()
    return submit(args) if args.command == "submit" else collect(args)


if __name__ == "__main__":
    sys.exit(main())
