"""A BasicSR options dict (the parsed training YAML) as `make_loader` arguments: `loader_options`, and the keys it
reads, ignores and refuses; `read_options_file`, the training YAML checked before their parser reads it. Needs
neither basicsr nor torch (PyYAML, which every BasicSR-family repository needs, for the file)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError

WHERE = "BasicSR options datasets.train"
# paired datasets whose training samples are a random crop of a stored pair, flipped/rotated, in [0, 1]: what a
# pairload split is; other types make their inputs themselves and would be silently replaced
PAIRED_TYPES = ("PairedImageDataset", "Dataset_PairedImage")
# dataset types of BasicSR, Restormer, Retinexformer and NAFNet whose samples are not crops of stored pairs: what
# each makes, for the one message that refuses it
MADE_BY_TYPE = {
    "Dataset_GaussianDenoising": "adds Gaussian noise to clean targets",
    "Dataset_DefocusDeblur_DualPixel_16bit": "stacks two input views (dataroot_lqL, dataroot_lqR) into one input",
    "Dataset_SIDImage": "reads frame sequences (N_frames) of SID's video folders resized to train_size",
    "Dataset_SMIDImage": "reads frame sequences (N_frames) of SMID's video folders resized to train_size",
    "Dataset_SDSDImage": "reads frame sequences (N_frames) of SDSD's video folders resized to train_size",
    "PairedStereoImageDataset": "stacks left and right stereo views into one input",
    "REDSDataset": "reads video frame sequences", "REDSRecurrentDataset": "reads video frame sequences",
    "Vimeo90KDataset": "reads video frame sequences", "Vimeo90KRecurrentDataset": "reads video frame sequences",
    "VideoTestDataset": "reads video frame sequences",
    "RealESRGANDataset": "degrades targets with random blur kernels (its inputs are made on the GPU by the model)",
    "FFHQDataset": "reads targets only (face images for GANs)",
    "SingleImageDataset": "reads inputs only",
}
MAPPED = ("gt_size", "batch_size_per_gpu", "use_hflip", "use_flip", "use_rot", "geometric_augs",
          "dataset_enlarge_ratio", "use_shuffle", "num_worker_per_gpu", "scale", "type", "degrade",
          "degrade_sources")
SCHEDULE_KEYS = ("mini_batch_sizes", "gt_sizes", "iters")
# where the pairs come from (the folders `pairload pack` read) and how BasicSR's own Dataset and DataLoader run:
# replaced by the shard folder and the pairload loader, with no effect on the samples
IGNORED = ("name", "phase", "dataroot_gt", "dataroot_lq", "meta_info_file", "meta_info", "filename_tmpl",
           "io_backend", "cache_data", "prefetch_mode", "pin_memory", "persistent_workers", "num_prefetch_queue")
CHECKED = ("mean", "std", "color")  # read only to refuse them (they change the samples)
PROGRESSIVE = ("loader", "code")


def loader_options(opt: Mapping, *, progressive: str = "loader",
                   log: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """`make_loader` keyword arguments from a BasicSR options dict: the whole parsed options (its
    `datasets: train:` part is read, with `manual_seed`, `rank`, `world_size`, `scale` and `train: total_iter`
    beside it) or the `datasets: train:` dict alone.

    gt_size → crop; batch_size_per_gpu → batch_size (per rank, as in BasicSR); dataset_enlarge_ratio → repeats;
    use_shuffle → shuffle; num_worker_per_gpu → num_workers; manual_seed → seed; rank/world_size as BasicSR's
    `parse_options` sets them. Augmentation: pairload draws one of the eight orientations of the dihedral group
    (`pairload.dihedral`) uniformly per sample, or none, so use_hflip (use_flip) and use_rot both true, or
    geometric_augs true (Restormer's `random_augmentation`), → augment=True; all false or absent → augment=False;
    horizontal flips alone, or use_rot without use_hflip, are refused.

    Restormer's progressive training (mini_batch_sizes, gt_sizes and iters, lists of one length; iters are each
    stage's length in iterations), by `progressive`:
    - "loader" (for a train.py whose progressive block was removed): the loader delivers each stage's batches,
      `schedule=[(step, crop, batch), ...]` with stage i starting at step sum(iters[:i]) and, as Restormer's
      train.py cuts its stage windows and mini-batches from the gt_size × batch_size_per_gpu batch, crop
      min(gt_sizes[i], gt_size) and batch min(mini_batch_sizes[i], batch_size_per_gpu); stages starting at or after
      total_iter are left out, and a one-stage schedule is plain crop and batch_size;
    - "code" (their train.py unchanged, as `python -m pairload.basicsr` runs it): the loader delivers gt_size ×
      batch_size_per_gpu batches throughout and their progressive block cuts each stage from them, as it does from
      their own loader's.

    Without a launcher (`dist: false`) and with num_gpu N > 1, BasicSR's DataParallel loads batch_size_per_gpu × N
    rows with N × num_worker_per_gpu workers per iteration (`data_parallel_gpus`): so does the loader.

    pairload's own keys: degrade ("lowlight", "lowlight,gamma=2..3" or a mapping such as {model: lowlight, gamma:
    [2, 3]}) → degrade, as its canonical string (the inputs are degraded from the targets), and degrade_sources
    (a list of names) → degrade_sources. A dataset `type` other than a paired one (`PAIRED_TYPES`) is refused by
    that name alone; the keys naming the source folders and BasicSR's DataLoader mechanics (`IGNORED`) are accepted
    and listed once through `log` (default: this module's logger, at INFO); any other key is refused by name, as
    are mean/std, color: y and scale other than 1 (they change the samples; pairload's are the stored pairs, or
    the degraded ones, in [0, 1])."""
    if progressive not in PROGRESSIVE:
        raise ConfigError(f"loader_options: progressive={progressive!r}: expected 'loader' (the loader delivers "
                          "each stage's batches) or 'code' (train.py's progressive block cuts them)")
    top, train = _sections(opt)
    _refuse_type(train)
    _refuse_unknown(train)
    _check_samples(train, top)
    out: dict[str, Any] = {"augment": _augment(train)}
    out["repeats"] = _whole(train, "dataset_enlarge_ratio", 1)
    if train.get("use_shuffle") is not None:
        out["shuffle"] = _flag(train, "use_shuffle")
    if train.get("num_worker_per_gpu") is not None:
        out["num_workers"] = _whole(train, "num_worker_per_gpu", 0, minimum=0)
    if top.get("manual_seed") is not None:
        out["seed"] = _whole(top, "manual_seed", 0, minimum=0, where="BasicSR options")
    for key in ("rank", "world_size"):
        if top.get(key) is not None:
            out[key] = _whole(top, key, 0, minimum=0 if key == "rank" else 1, where="BasicSR options")
    out.update(_degrade(train))
    total_iter = None
    if isinstance(top.get("train"), Mapping) and top["train"].get("total_iter") is not None:
        given = top["train"]["total_iter"]  # BasicSR takes int(total_iter): YAMLs write `!!float 3e5` too
        whole = {"total_iter": int(given) if isinstance(given, float) and given.is_integer() else given}
        total_iter = _whole(whole, "total_iter", 1, where="BasicSR options train")
    stages = _stages(train, total_iter)
    k = data_parallel_gpus(opt)
    if k > 1 and "num_workers" in out:
        out["num_workers"] *= k
    if progressive == "code":
        # their block cuts the stages out of full batches: the loader delivers those, whatever the stages are
        out["crop"], out["batch_size"] = _required(train, "gt_size"), _required(train, "batch_size_per_gpu") * k
    else:
        # DataParallel: a stage whose mini-batch is smaller than batch_size_per_gpu is cut to it from the process's
        # batch; the others use the whole batch of batch_size_per_gpu × num_gpu rows
        per_gpu = train.get("batch_size_per_gpu")
        stages = [(step, crop, batch * k if batch == per_gpu or per_gpu is None else batch)
                  for step, crop, batch in stages]
        if len(stages) > 1:
            out["schedule"] = stages
        else:
            out["crop"], out["batch_size"] = stages[0][1], stages[0][2]
    ignored = ignored_keys(train)
    if ignored:
        (log or logging.getLogger(__name__).info)(
            f"{WHERE}: {', '.join(ignored)} not used: they name the source folders or how BasicSR's own DataLoader "
            "reads them, which the shard folder and the pairload loader replace (the samples are the same)")
    return out


def data_parallel_gpus(opt: Mapping) -> int:
    """The GPUs one process drives: BasicSR without a launcher (`dist: false`, as parse_options sets it) and
    num_gpu N > 1 wraps the model in DataParallel and loads batch_size_per_gpu × N rows (and N × num_worker_per_gpu
    workers) per iteration; else 1."""
    top = _sections(opt)[0]
    n = top.get("num_gpu", 1)
    if top.get("dist") is not False or isinstance(n, bool):
        return 1
    if n == "auto":
        import torch

        n = torch.cuda.device_count()
    return n if isinstance(n, int) and n > 1 else 1


def ignored_keys(opt: Mapping) -> list[str]:
    """The keys of `datasets: train:` (or of the dict given) that `loader_options` accepts without using them."""
    train = _sections(opt)[1]
    return [str(k) for k in train if k in IGNORED]


def _sections(opt: Mapping) -> tuple[Mapping, Mapping]:
    """(the whole options or {}, the datasets: train: dict)."""
    if not isinstance(opt, Mapping):
        raise ConfigError(f"BasicSR options: expected a dict (the parsed YAML), found {type(opt).__name__}")
    if "datasets" not in opt:
        return {}, opt
    datasets = opt["datasets"]
    if not isinstance(datasets, Mapping) or not isinstance(datasets.get("train"), Mapping):
        raise ConfigError("BasicSR options: no datasets: train: section; pass the options parsed from the "
                          "training YAML, or its datasets: train: dict")
    return opt, datasets["train"]


def _refuse_type(train: Mapping) -> None:
    """A dataset that makes its own samples is refused by its type alone (its other keys are its own business)."""
    kind = train.get("type")
    if kind is None or kind in PAIRED_TYPES:
        return
    made = MADE_BY_TYPE.get(str(kind), "is not a paired dataset pairload knows, so its samples may not be crops of "
                                       "stored pairs")
    raise ConfigError(f"{WHERE}.type={kind}: this dataset {made}; pairload reproduces only the paired datasets "
                      f"({', '.join(PAIRED_TYPES)}: random crops of stored pairs); train with the repository's own "
                      "loader (python basicsr/train.py), or pack the pairs it would make with `pairload pack` and "
                      "set type: PairedImageDataset")


def _refuse_unknown(train: Mapping) -> None:
    unknown = [str(k) for k in train if k not in MAPPED and k not in IGNORED and k not in SCHEDULE_KEYS
               and k not in CHECKED]
    if unknown:
        one = len(unknown) == 1
        raise ConfigError(f"{WHERE}: {', '.join(sorted(unknown))} not understood: pairload cannot tell whether "
                          f"{'it changes' if one else 'they change'} the samples; remove {'it' if one else 'them'} "
                          f"from the options (loader_options reads {', '.join(MAPPED + SCHEDULE_KEYS)}, refuses "
                          f"{', '.join(CHECKED)} where they change the samples, and accepts {', '.join(IGNORED)} "
                          "unused)")


def _check_samples(train: Mapping, top: Mapping) -> None:
    """Refuse the keys that make BasicSR's samples differ from the stored pairs in [0, 1]."""
    for where, scope in (("BasicSR options", top), (WHERE, train)):
        scale = scope.get("scale", 1)
        if scale is not None and scale != 1:
            raise ConfigError(f"{where}.scale={scale!r}: expected 1; pairload crops input and target at one size (a "
                              "packed camera raw input is the only other relation, set by the split): train "
                              "super-resolution with BasicSR's own loader")
    given = [k for k in ("mean", "std") if train.get(k) is not None]
    if given:
        shown = ", ".join(f"{k}={train[k]}" for k in given)
        raise ConfigError(f"{WHERE}: {shown}: BasicSR would normalise the samples, loader_options gives pairload's "
                          "in [0, 1]; remove mean/std from the options and pass "
                          "BasicSRBatches(loader, normalize=Normalize(mean, std))")
    if str(train.get("color", "")).lower() == "y":
        raise ConfigError(f"{WHERE}.color=y: BasicSR would train on the Y channel, pairload batches are the stored "
                          "channels; pack Y images, or remove color: y")
def _degrade(train: Mapping) -> dict[str, Any]:
    """degrade and degrade_sources, checked here so that a mistake names the options' key."""
    from ..degrade.spec import Degradation

    value, sources = train.get("degrade"), train.get("degrade_sources")
    if value is None:
        if sources is not None:
            raise ConfigError(f"{WHERE}.degrade_sources={sources!r}: there is no degrade to apply; add degrade: "
                              "lowlight (for example), or remove degrade_sources")
        return {}
    try:
        out: dict[str, Any] = {"degrade": Degradation.of(dict(value) if isinstance(value, Mapping) else value)
                               .describe()}
    except ConfigError as exc:
        raise ConfigError(f"{WHERE}.degrade={value!r}: {exc}") from None
    if sources is not None:
        names = [sources] if isinstance(sources, str) else sources
        if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{WHERE}.degrade_sources={sources!r}: expected a list of the mixed sources' names, "
                              "e.g. [made]")
        out["degrade_sources"] = tuple(names)
    return out


def _flag(scope: Mapping, key: str, where: str = WHERE) -> bool:
    value = scope[key]
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}={value!r}: expected true or false")
    return value


def _whole(scope: Mapping, key: str, default: int, *, minimum: int = 1, where: str = WHERE) -> int:
    value = scope.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}.{key}={value!r}: expected a whole number, at least {minimum}")
    return value


def _augment(train: Mapping) -> bool:
    """use_hflip/use_flip, use_rot and geometric_augs → pairload's augment (see `loader_options`)."""
    flips = [k for k in ("use_hflip", "use_flip") if train.get(k) is not None]
    hflip = {k: _flag(train, k) for k in flips}
    if len(set(hflip.values())) > 1:
        raise ConfigError(f"{WHERE}: use_hflip={train['use_hflip']} but use_flip={train['use_flip']} (two names of "
                          "one switch: BasicSR reads use_hflip, older copies use_flip); give them one value")
    h = any(hflip.values())
    rot = _flag(train, "use_rot") if train.get("use_rot") is not None else False
    if h != rot:
        flip_key = flips[0] if flips else "use_hflip"
        what = ("horizontal flips alone" if h else
                "vertical flips and transposes without horizontal flips (four of the eight orientations)")
        raise ConfigError(f"{WHERE}: {flip_key}={h}, use_rot={rot} ({what}) cannot be mapped: pairload draws all "
                          "eight orientations of the dihedral group (augment=True) or none; set both true (or both "
                          "false)")
    if train.get("geometric_augs") is not None:
        geo = _flag(train, "geometric_augs")
        if (flips or "use_rot" in train) and geo != h:
            raise ConfigError(f"{WHERE}: geometric_augs={geo} but use_hflip/use_rot are {h} (Restormer's datasets read "
                              "geometric_augs, BasicSR's use_hflip/use_rot); give them one value")
        return geo
    return h


def _int_list(train: Mapping, key: str) -> list[int]:
    value = train[key]
    if not isinstance(value, (list, tuple)) or not value or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value):
        raise ConfigError(f"{WHERE}.{key}={value!r}: expected a list of positive whole numbers")
    return list(value)


def _stages(train: Mapping, total_iter: int | None) -> list[tuple[int, int, int]]:
    """(step, crop, batch) of each stage: one stage from gt_size and batch_size_per_gpu, or Restormer's."""
    given = [k for k in SCHEDULE_KEYS if train.get(k) is not None]
    cap_crop = _whole(train, "gt_size", 0) if train.get("gt_size") is not None else None
    cap_batch = _whole(train, "batch_size_per_gpu", 0) if train.get("batch_size_per_gpu") is not None else None
    if not given:
        for key, value in (("gt_size", cap_crop), ("batch_size_per_gpu", cap_batch)):
            if value is None:
                what, e = ("the crop side", 128) if key == "gt_size" else ("the batch size per rank", 8)
                raise ConfigError(f"{WHERE}: no {key}; pairload needs {what} (e.g. {key}: {e}), or Restormer's "
                                  "mini_batch_sizes, gt_sizes and iters")
        return [(0, cap_crop, cap_batch)]
    if len(given) < len(SCHEDULE_KEYS):
        missing = [k for k in SCHEDULE_KEYS if k not in given]
        raise ConfigError(f"{WHERE}: {', '.join(given)} without {', '.join(missing)}: progressive training needs "
                          "mini_batch_sizes, gt_sizes and iters, one entry per stage")
    batches, crops, iters = (_int_list(train, k) for k in SCHEDULE_KEYS)
    if not len(batches) == len(crops) == len(iters):
        raise ConfigError(f"{WHERE}: mini_batch_sizes has {len(batches)} entries, gt_sizes {len(crops)}, iters "
                          f"{len(iters)}; give one entry per stage in each")
    stages, step = [], 0
    for b, c, n in zip(batches, crops, iters):
        if total_iter is None or step < total_iter:
            stages.append((step, c if cap_crop is None else min(c, cap_crop),
                           b if cap_batch is None else min(b, cap_batch)))
        step += n
    return stages




def _required(train: Mapping, key: str) -> int:
    if train.get(key) is None:
        what, e = ("the crop side", 128) if key == "gt_size" else ("the batch size per rank", 8)
        raise ConfigError(f"{WHERE}: no {key}; pairload needs {what} (e.g. {key}: {e})")
    return _whole(train, key, 0)


# what a training YAML holds, for the refusals of one that cannot be their options
OPTIONS_FIX = ("copy one of the repository's own training option files and edit it (name:, datasets: train: and "
               "val:, network_g:, train: total_iter: ...)")


def read_options_file(path: Path, label: str) -> dict:
    """The training YAML at `path` (`label`: how the command line names it, such as "-opt Options/x.yml") as a dict,
    with a `datasets: train:` mapping and every other dataset a mapping too: what their parse_options reads before
    anything else. A folder, an unreadable or empty file, text that is not YAML (the parser's line and column), a
    YAML that is not a mapping, or one without those sections is a ConfigError naming `label`. Tags their loader
    would construct as Python objects are read as plain values (nothing is executed here)."""
    import yaml

    if path.is_dir():
        ymls = sorted(p.name for p in path.glob("*.y*ml"))[:3]
        example = f" ({', '.join(ymls)}, ...)" if ymls else ""
        raise ConfigError(f"{label}: is a folder; pass one training YAML in it{example}, e.g. "
                          f"{label}/{ymls[0] if ymls else 'NAME.yml'}")
    try:
        with open(path, "rb") as fh:
            text = fh.read()
            doc = yaml.load(text, Loader=_options_loader())
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read it ({exc.strerror or exc}); check the path and its permissions"
                          ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{label}: not YAML ({_yaml_problem(exc)}); correct the file there, or "
                          f"{OPTIONS_FIX}") from None
    if doc is None:
        found = "the file is empty" if not text.strip() else "it holds no options (comments only, or null)"
        raise ConfigError(f"{label}: {found}; {OPTIONS_FIX}")
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{label}: the YAML is {_yaml_kind(doc)}, not a mapping of options; {OPTIONS_FIX}")
    datasets = doc.get("datasets")
    if datasets is None:
        raise ConfigError(f"{label}: no datasets: section (found {_keys(doc)}); add datasets: with a train: "
                          "dataset (type: PairedImageDataset, gt_size, batch_size_per_gpu, ...), or "
                          f"{OPTIONS_FIX}")
    if not isinstance(datasets, Mapping):
        raise ConfigError(f"{label}: datasets is {_yaml_kind(datasets)}, expected a mapping of phases (train:, "
                          "val:); indent the datasets under it")
    if not isinstance(datasets.get("train"), Mapping):
        found = f"train is {_yaml_kind(datasets['train'])}" if "train" in datasets else f"found {_keys(datasets)}"
        raise ConfigError(f"{label}: no datasets: train: mapping ({found}); pairload.basicsr trains on the train "
                          "phase: add datasets: train: with type: PairedImageDataset, gt_size and batch_size_per_gpu")
    for phase, dataset in datasets.items():
        if not isinstance(dataset, Mapping):
            raise ConfigError(f"{label}: datasets.{phase} is {_yaml_kind(dataset)}, expected a mapping of that "
                              "dataset's options (name:, type:, dataroot_lq:, dataroot_gt:, ...); indent them "
                              f"under {phase}:, or remove {phase}:")
    _refuse_repeated(yaml.compose(text, Loader=_options_loader()), label)
    return dict(doc)


READ_SECTIONS = ((), ("datasets",), ("datasets", "train"), ("train",))  # the mappings pairload reads keys of


def _refuse_repeated(root, label: str) -> None:
    """A key written twice in a mapping pairload reads (`READ_SECTIONS`): YAML parsers keep the last value
    silently, so one of the two is not what trains; keys a merge (<<: *anchor) brings are overridden by design."""
    import yaml

    for path in READ_SECTIONS:
        node = root
        for name in path:
            node = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == name), None)
            if not isinstance(node, yaml.MappingNode):
                break
        else:
            seen: dict[tuple[str, str], int] = {}
            for key, _ in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                first = seen.setdefault((key.tag, key.value), key.start_mark.line + 1)
                if first != key.start_mark.line + 1:
                    where = ".".join((*path, key.value))
                    raise ConfigError(f"{label}: {where} is given twice (lines {first} and "
                                      f"{key.start_mark.line + 1}); a YAML parser keeps the last one silently: "
                                      "remove one of them")


def _options_loader():
    """PyYAML's safe loader, reading any tag it does not know (their loader's !!python/... tags) as the plain value
    under it."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def plain(loader, _suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("", plain)
    return Loader


def _yaml_problem(exc) -> str:
    """What the YAML parser found, and where: "PROBLEM at line L, column C" (1-based), or its reader's byte."""
    import yaml

    mark = getattr(exc, "problem_mark", None)
    if isinstance(exc, yaml.reader.ReaderError):
        return f"not text: {exc.reason} at byte {exc.position}"
    if mark is not None:  # "but found ..." says what the context expected ("expected a single document ...")
        problem = f"{exc.context} {exc.problem}" if exc.context and str(exc.problem).startswith("but") else exc.problem
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def _yaml_kind(value) -> str:
    if value is None:
        return "empty (null)"
    kind = {list: "a list", str: "a string", bool: "true or false", int: "a number", float: "a number"}.get(
        type(value), f"a {type(value).__name__}")
    shown = repr(value)
    return f"{kind} ({shown[:40]}{'...' if len(shown) > 40 else ''})"


def _keys(mapping: Mapping) -> str:
    names = [str(k) for k in mapping]
    return f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''}" if names else "no keys"
