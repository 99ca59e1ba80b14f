"""Every Hugging Face architecture outside the zoo: imported, planned, simulated, compared.

For each base model class of ``transformers`` (its ``MODEL_MAPPING_NAMES``) that the importer
zoo (``tests/importers/test_torch_zoo.py``) does not test: the zoo's shrunk config (applied to
the text, vision and audio sub-configs too), random weights (the zoo's ``_redrawn``), inputs
made from the model's ``forward`` signature (token ids, an image of the vision config's size,
1,600 audio samples, 64 frames of mel features, word boxes; before the ids, as many image
tokens as a vision-language model's check asks for), then ``from_module``, a plan
(fusion, 4 streams), the simulator, and eager PyTorch's outputs to compare with. Nothing is
downloaded.

Each model runs in a process of its own, under a memory limit and a timeout, so a model
that exhausts memory or hangs is one row of the report, not the end of the run. What each
row ends as:

* ``whole``: no opaque kernel, every output within 2e-5 of eager's largest magnitude (the
  zoo's bar, ``OF_LARGEST``);
* ``whole, amplified``: further from eager than that, but no further from a float64 eager
  run than twice float32 eager's own distance from it (plus 2e-5): random weights without
  normalisation amplify rounding, and the plan sums in another order than eager;
* ``opaque``: imported with opaque kernels (their reasons are listed), simulating as the
  rows above;
* ``WRONG``: an output's shape, dtype or integer values differ from eager's, or its floats
  are further off than the rows above allow, opaque kernels or not: a bug to chase;
* ``refused``: the importer refused the program as one today's IR cannot express
  (``UnsupportedModel``: an empty tensor, a mutated buffer, ...; the reason is listed);
* ``oxiwork error``: the import, the plan or the simulation raised anything else: a bug;
* ``budget``: the simulator's budget refused the arena (a big default sub-config);
* ``not ours``: building the model failed, its eager run on the harness's inputs raised
  (its own checks among them), or ``torch.export`` refused its code on these inputs (the
  harness's config or inputs do not fit the model);
* ``timeout``, ``killed`` (out of memory, or a crash).

Needs ``transformers`` (the ``[test]`` extra). Usage::

    PYTHONPATH=. .venv/bin/python bench/hf_survey.py [--jobs 2] [--timeout 150]
        [--memory-gib 9] [--only bert,clip] [--results survey.jsonl] [--limit N]

``--results`` keeps one JSON line per model and skips the models already in it (a run can
be stopped and resumed). Prints markdown: the count per outcome, then every row that is not
``whole``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import copy
import inspect
import json
import re
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

#: How far an output may be from eager's, relative to eager's largest output magnitude.
OF_LARGEST = 2e-5
SUB_CONFIGS = ("text_config", "vision_config", "audio_config", "encoder_config", "decoder_config")
OUTCOMES = (
    "whole",
    "whole, amplified",
    "opaque",
    "WRONG",
    "refused",
    "oxiwork error",
    "budget",
    "not ours",
    "timeout",
    "killed",
)


def architectures() -> list[tuple[str, str, str]]:
    """``(model type, model class, config class)`` of every base model transformers maps
    whose class the zoo does not test and this transformers exports."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    zoo = (ROOT / "tests" / "importers" / "test_torch_zoo.py").read_text()
    out = []
    for kind, model in MODEL_MAPPING_NAMES.items():
        model = model[0] if isinstance(model, (list, tuple)) else model
        config = CONFIG_MAPPING_NAMES.get(kind)
        tested = re.search(rf"\b{model}\b", zoo) is not None  # named by the zoo's makers
        if config and not tested and hasattr(transformers, model) and hasattr(transformers, config):
            out.append((kind, model, config))
    return out


def _shrink(config: Any) -> None:
    """The zoo's shrink, on the sub-configs a multimodal config holds (``_config`` shrinks
    the top level only)."""
    from tests.importers.test_torch_zoo import _FEATURES, _SMALL

    for key, value in _FEATURES.items():
        if hasattr(config, key):
            with contextlib.suppress(Exception):  # a config typing it otherwise keeps its own
                setattr(config, key, value)
    subs = [getattr(config, name, None) for name in SUB_CONFIGS]
    subs = [sub for sub in subs if sub is not None and hasattr(sub, "to_dict")]
    for sub in subs:
        for key, value in _SMALL.items():
            if hasattr(sub, key) and not isinstance(getattr(type(sub), key, None), property):
                with contextlib.suppress(Exception):
                    setattr(sub, key, value)
        sub._attn_implementation = "eager"
        if hasattr(sub, "use_cache"):
            sub.use_cache = False  # (a cache in the outputs is no tensor torch.export returns)
    for c in (config, *subs):  # special tokens inside the shrunk vocabulary
        vocab = getattr(c, "vocab_size", None)
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            token = getattr(c, key, None)
            if isinstance(vocab, int) and isinstance(token, int) and token >= vocab:
                with contextlib.suppress(Exception):
                    setattr(c, key, 0)
    # a vision-language model's image token: the text's last id (the harness's ids are
    # below 500, so only the tokens it places are image tokens)
    vocab = getattr(getattr(config, "text_config", None), "vocab_size", None)
    for key in IMAGE_TOKEN_KEYS:
        token = getattr(config, key, None)
        if isinstance(vocab, int) and isinstance(token, int) and token >= vocab:
            with contextlib.suppress(Exception):
                setattr(config, key, vocab - 1)


def make(model_cls: str, config_cls: str) -> tuple[Any, dict[str, Any]]:
    """The shrunk model with random weights, and keyword inputs for its ``forward``."""
    import torch
    import transformers

    from tests.importers.test_torch_zoo import _config, _ids, _redrawn

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=torch.Generator().manual_seed(0))

    config = _config(config_cls)
    _shrink(config)
    model = _redrawn(getattr(transformers, model_cls)(config))
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    kw: dict[str, Any] = {}

    def image(cfg: Any) -> torch.Tensor:
        size = getattr(cfg, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        size = min(int(size), 64) if isinstance(size, int) else 32
        channels = getattr(cfg, "num_channels", 3)
        return draw(1, channels if isinstance(channels, int) else 3, size, size)

    if main == "pixel_values":
        kw["pixel_values"] = image(config)
    elif main == "input_values":
        kw["input_values"] = draw(1, 1600)
    elif main == "input_features":
        kw["input_features"] = draw(1, getattr(config, "num_mel_bins", 16), 64)
    else:
        kw["input_ids"] = _ids(16)
    vision = getattr(config, "vision_config", None)
    if "pixel_values" in params and "pixel_values" not in kw and vision is not None:
        kw["pixel_values"] = image(vision)
    ids = params.get("input_ids")
    if ids is not None and "input_ids" not in kw and ids.default is inspect.Parameter.empty:
        kw["input_ids"] = _ids(16)
    if "bbox" in params:  # word boxes: x0 <= x1, y0 <= y1 inside 0..1000
        box = torch.randint(0, 500, (1, 16, 4), generator=torch.Generator().manual_seed(0))
        box[..., 2:] += box[..., :2]
        kw["bbox"] = box.clamp(max=1000)
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        kw["decoder_input_ids"] = _ids(7, 1)
    _place_image_tokens(model, config, kw)
    return model, kw


IMAGE_TOKEN_KEYS = ("image_token_id", "image_token_index")


def _place_image_tokens(model: Any, config: Any, kw: dict[str, Any]) -> None:
    """A vision-language model checks that its text holds one image token per image
    feature (transformers: "Image features and image tokens do not match, tokens: 0,
    features: N"): put the N it names before the text (up to 1,024)."""
    import torch

    token = next(
        (getattr(config, k) for k in IMAGE_TOKEN_KEYS if isinstance(getattr(config, k, None), int)),
        None,
    )
    if token is None or "pixel_values" not in kw or "input_ids" not in kw:
        return
    try:
        with torch.no_grad():
            model(**kw)
    except Exception as e:
        said = re.search(r"tokens: 0, features: (\d+)", str(e))
        if said and int(said.group(1)) <= 1024:
            image = torch.full((1, int(said.group(1))), token, dtype=kw["input_ids"].dtype)
            kw["input_ids"] = torch.cat([image, kw["input_ids"]], dim=1)


def _amplified(model: Any, kw: dict[str, Any], got: Any, eager: Any) -> tuple[bool, float]:
    """Is every output that misses eager's bar no further from a float64 eager run than
    twice float32 eager's distance from it (plus the bar)? And the worst ratio of our
    distance to eager's."""
    import numpy as np
    import torch
    from torch.utils._pytree import tree_flatten

    wide = copy.deepcopy(model).double()
    kw64 = {k: v.double() if v.is_floating_point() else v for k, v in kw.items()}
    with torch.no_grad():
        narrow = [t for t in tree_flatten(model(**kw))[0] if isinstance(t, torch.Tensor)]
        exact = [t for t in tree_flatten(wide(**kw64))[0] if isinstance(t, torch.Tensor)]
    ok, worst = True, 0.0
    for out, want in zip(got, eager, strict=True):
        if want.dtype.kind not in "fc" or want.size == 0:
            continue
        scale = float(np.max(np.abs(want))) or 1.0
        if float(np.max(np.abs(out.astype(np.float64) - want))) <= OF_LARGEST * scale:
            continue
        # the float64 run's output of this one: the eager output it equals
        at = [
            k
            for k, t in enumerate(narrow)
            if tuple(t.shape) == want.shape and np.array_equal(t.numpy(), want)
        ]
        if not at:
            return False, float("inf")
        ref = exact[at[0]].numpy()
        scale = float(np.max(np.abs(ref))) or 1.0
        theirs = float(np.max(np.abs(want - ref))) / scale
        ours = float(np.max(np.abs(out - ref))) / scale
        worst = max(worst, ours / max(theirs, 1e-12))
        ok = ok and ours <= 2 * theirs + OF_LARGEST
    return ok, worst


def one(kind: str, model_cls: str, config_cls: str) -> dict[str, Any]:
    """Survey one architecture (in this process): its report row."""
    import numpy as np

    from oxiwork import ExecutionPlan, SequentialExecutor
    from oxiwork.error import BudgetExceeded
    from oxiwork.importers.torch import ExportFailed, UnsupportedModel, from_module

    row: dict[str, Any] = {"type": kind, "model": model_cls}
    start = time.perf_counter()
    stage = "model"
    try:
        model, kw = make(model_cls, config_cls)
        row["inputs"] = sorted(kw)
        stage = "eager"  # the model's own code on the harness's inputs (its checks too)
        import torch

        with torch.no_grad():
            model(**kw)
        stage = "import"
        imported = from_module(model, (), kw)
        row["kernels"] = len(imported.graph.kernels())
        stage = "plan"
        plan = ExecutionPlan.build(imported.graph, max_streams=4, fusion=True)
        stage = "simulate"
        run = SequentialExecutor(plan).run(imported.inputs)
        got = imported.outputs_from(run.outputs)
        eager = imported.eager_outputs
        worst, exact = 0.0, True  # (exact: shapes, dtypes and every non-float value equal)
        for out, want in zip(got, eager, strict=True):
            if out.shape != want.shape or out.dtype != want.dtype:
                exact = False
            elif want.size and want.dtype.kind in "fc":
                scale = float(np.max(np.abs(want))) or 1.0
                worst = max(worst, float(np.max(np.abs(out.astype(np.float64) - want))) / scale)
            elif want.size:
                exact = exact and bool(np.array_equal(out, want))
        row["worst"] = worst if exact else float("inf")
        amplified = True
        if exact and worst > OF_LARGEST:
            amplified, ratio = _amplified(model, kw, got, eager)
            row["ours_over_eager_from_float64"] = ratio
        if not exact or not amplified:  # (opaque kernels or not: other values are a bug)
            row["outcome"] = "WRONG"
        elif imported.opaque:
            row["outcome"] = "opaque"
        else:
            row["outcome"] = "whole" if worst <= OF_LARGEST else "whole, amplified"
        if imported.opaque:
            row["detail"] = dict(
                collections.Counter(f"{o.target}: {o.reason[:120]}" for o in imported.opaque)
            )
    except Exception as e:
        text = f"{type(e).__name__}: {str(e)[:300]}"
        if isinstance(e, BudgetExceeded):
            row["outcome"] = "budget"
        elif stage in ("model", "eager") or isinstance(e, ExportFailed):
            row["outcome"] = "not ours"
        elif isinstance(e, UnsupportedModel):
            row["outcome"] = "refused"
        else:
            row["outcome"] = "oxiwork error"
            row["traceback"] = traceback.format_exc()[-2000:]
        row["stage"], row["detail"] = stage, text
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def _limited(gib: float) -> None:
    import resource

    limit = int(gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_one(arch: tuple[str, str, str], timeout: float, gib: float) -> dict[str, Any]:
    """Survey ``arch`` in a child process: its row, or a timeout or killed row."""
    cmd = [sys.executable, __file__, "--one", *arch, "--memory-gib", str(gib)]
    row = {"type": arch[0], "model": arch[1]}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**row, "outcome": "timeout", "detail": f"over {timeout:g} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {
            **row,
            "outcome": "killed",
            "detail": f"exit {done.returncode}: {done.stderr[-200:]}",
        }
    return json.loads(lines[-1])


def report(rows: list[dict[str, Any]]) -> None:
    counts = collections.Counter(r["outcome"] for r in rows)
    print(f"{len(rows)} architectures outside the zoo:\n")
    print("| outcome | architectures |\n|---|---:|")
    for outcome in OUTCOMES:
        print(f"| {outcome} | {counts.get(outcome, 0)} |")
    rest = [r for r in rows if r["outcome"] != "whole"]
    if rest:
        print("\n| model | outcome | stage | detail |\n|---|---|---|---|")
        for r in sorted(rest, key=lambda r: (OUTCOMES.index(r["outcome"]), r["model"])):
            detail = r.get("detail", "")
            if r["outcome"] == "whole, amplified":
                detail = f"{r['worst']:.1e} from eager; {r['ours_over_eager_from_float64']:.2f}x eager's distance from float64"
            text = json.dumps(detail) if isinstance(detail, dict) else str(detail)
            text = text.replace("|", "\\|").replace("\n", " ")[:200]
            print(f"| {r['model']} | {r['outcome']} | {r.get('stage', '')} | {text} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", nargs=3, metavar=("TYPE", "MODEL", "CONFIG"), help=argparse.SUPPRESS)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=150.0)
    ap.add_argument("--memory-gib", type=float, default=9.0, help="address space per model")
    ap.add_argument("--only", help="comma-separated model types (default: all)")
    ap.add_argument("--limit", type=int, help="survey at most this many (after --only)")
    ap.add_argument("--results", type=Path, help="JSON lines to keep rows in and resume from")
    args = ap.parse_args()
    if args.one:
        _limited(args.memory_gib)
        warnings.simplefilter("ignore")
        print(json.dumps(one(*args.one)), flush=True)
        return
    todo = architectures()
    if args.only:
        wanted = set(args.only.split(","))
        todo = [a for a in todo if a[0] in wanted]
    rows: list[dict[str, Any]] = []
    if args.results and args.results.exists():
        rows = [json.loads(line) for line in args.results.read_text().splitlines() if line]
        seen = {r["model"] for r in rows}
        todo = [a for a in todo if a[1] not in seen]
    todo = todo[: args.limit] if args.limit is not None else todo
    print(f"<!-- {len(todo)} to survey, {len(rows)} kept -->", file=sys.stderr)
    sink = args.results.open("a") if args.results else None
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, a, args.timeout, args.memory_gib) for a in todo]
        for future in concurrent.futures.as_completed(futures):
            row = future.result()
            rows.append(row)
            print(f"<!-- {row['model']}: {row['outcome']} -->", file=sys.stderr, flush=True)
            if sink:
                sink.write(json.dumps(row) + "\n")
                sink.flush()
    report(rows)


if __name__ == "__main__":
    main()
