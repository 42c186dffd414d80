"""`TrainConfig`, the reference loop's options, and their command-line form: every field carries its help text, and
`parse_args` derives one flag per field from them, so a new option is one field. Never imports torch."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields

from ..errors import ConfigError
from ..kinds import KINDS, LOADER_KINDS, RAW, SHARDS, Kind, kinds_that, one_of
from ..plan.config import is_whole
from ..remote.urls import is_url, storage_options
from ..degrade.models import models

HIDDEN = "<hidden>"  # what config.json and checkpoints hold in place of a --storage-option value (a secret, maybe)


def option(default, help: str, metavar: str | None = None):
    """A TrainConfig field with its command-line help (and the metavar its flag shows, if not the field's name)."""
    return field(default=default, metadata={"help": help, "metavar": metavar})


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    loader: str = option("ram", " | ".join(LOADER_KINDS) + " (the kinds of `pairload.kinds`)")
    shards: str | None = option(None, "folder written by `pairload pack` (all loaders but "
                                      f"{one_of(kinds_that(reads=RAW))})")
    raw: str | None = option(None, f"the dataset folder ({one_of(kinds_that(reads=RAW))}; also what `pairload pack` "
                                   "read)")
    out: str | None = option(None, "run folder: config.json, metrics.jsonl, last.pt/best.pt, validation pictures")
    epochs: int = option(10, "total epochs (with --resume: the new total)")
    batch_size: int = option(32, "pairs per step on each rank")
    crop: int = option(256, "training crop, pixels")
    lr: float = option(5e-4, "peak learning rate (AdamW); not scaled with the number of ranks")
    weight_decay: float = option(1e-4, "AdamW weight decay")
    warmup_steps: int = option(100, "linear warm-up steps, capped at a tenth of the run; then cosine decay to 0")
    # bf16 on a GPU, none on a CPU (autocast there is ~10x slower than float32)
    amp: str = option("auto", "auto (bf16 on a GPU, none on a CPU) | bf16 | fp16 | none")
    width: int = option(32, "model channels at full resolution")
    depth: int = option(3, "model levels (inputs are padded to a multiple of 2**depth inside the model)")
    sync_bn: bool = option(False, "synchronise batch-norm statistics across ranks")
    compile: bool = option(False, "torch.compile the model")
    ssim_weight: float = option(0.0, "loss = L1 + w * (1 - SSIM)")
    clip_grad: float = option(0.0, "clip the gradient norm (0: no clipping; non-finite steps are skipped either way)")
    workers: int = option(4, "loader workers (ram, wds) or threads (DALI) per rank")
    seed: int = option(0, "seed of the planner (order, crops, flips) and of the model")
    device: str = option("auto", "auto | cpu | cuda")
    val_batch_size: int = option(8, "validation batch (whole images; 1 when the test images differ in size)")
    crop_border: int = option(0, "validation PSNR/SSIM leave out this many pixels at each edge (BasicSR's "
                                 "crop_border)")
    y_channel: bool = option(False, "validation PSNR/SSIM on the Y channel of YCbCr, as MATLAB's rgb2ycbcr (BasicSR's "
                                    "test_y_channel)")
    resume: bool = option(False, "continue the run in --out from last.pt")
    init_from: str | None = option(None, "start from the model weights of this checkpoint (another run's last.pt or "
                                         "best.pt, e.g. pre-trained with --degrade; same --width/--depth); the "
                                         "optimizer and the schedule start afresh; with --resume, last.pt wins",
                                   metavar="CHECKPOINT")
    stop_after_epoch: int | None = option(None, "stop after this epoch (the schedule still spans --epochs)")
    max_steps: int | None = option(None, "at most this many steps per epoch (benchmarks)")
    save_every_steps: int = option(0, "also write last.pt every N steps, mid-epoch, with the loaders' state (0: epoch "
                                      "ends only)")
    image_count: int = option(3, "validation triplets (low | output | high) saved per epoch")
    dist_timeout: float = option(600.0, "seconds a collective waits for the other ranks before the job stops with "
                                        "an error")
    train_split: str = option("train", "split to train on")
    val_split: str = option("test", "split to validate on ('none': no validation)")
    allow_overlap: bool = option(False, "validate even on a --val-split whose images show scenes of the training "
                                        "data (refused otherwise: `pairload audit` lists them)")
    overwrite: bool = option(False, "replace a run already in --out")
    crop_schedule: str | None = option(None, "progressive training, STEP:CROP:BATCH,… from step 0 (e.g. "
                                             "0:128:8,92000:160:5): replaces --crop/--batch-size; the learning rate "
                                             "follows its own per-step schedule and is not rescaled when the batch "
                                             "shrinks")
    repeats: int = option(1, "passes over the training split per epoch, each with fresh crops (tiny sets such as LOL)")
    mix: str | None = option(None, "train on a weighted mix of shard folders, NAME=FOLDER:WEIGHT,… (validation stays "
                                   "on --shards)")
    epoch_size: int | None = option(None, "samples per epoch drawn from the --mix (default: all of its samples)")
    degrade: str | None = option(None, "degrade each training target into its input with a degradation model ("
                                       + ", ".join(models()) + "), its parameters' ranges after it if wanted, e.g. "
                                       "lowlight or 'lowlight,gamma=2..3' (the stored inputs are ignored; "
                                       "validation keeps the stored pairs)", metavar="SPEC")
    degrade_sources: str | None = option(None, "with --mix: the sources --degrade applies to, NAME,… (the others "
                                               "train on their stored pairs; None: all)", metavar="NAME,…")
    clips: str | None = option(None, "train on clips of frames of a split packed with --sequences: T, or "
                                     "'T,stride=S,start=random|grid,short=refuse|drop|pad' (pairload.plan.Clips); the "
                                     "model takes the T input frames stacked in channels and predicts the centre "
                                     "frame's target (frame T//2); validation takes the clips on the grid",
                               metavar="SPEC")
    cache_dir: str | None = option(None, "node-local folder for shards read from a URL (--shards s3://…, https://…), "
                                         "shared by the node's ranks (default: ~/.cache/pairload)")
    cache_limit: str | None = option(None, "bytes of shards the cache keeps, e.g. 500GB (default: the disk's free "
                                           "space); ram needs the split whole, wds streams within it")
    storage_option: tuple[str, ...] = option((), "KEY=VALUE for the fsspec backend of --shards/--mix URLs (repeat "
                                                 "it): key=ID, secret=KEY, endpoint_url=URL (MinIO, Ceph, R2), "
                                                 "anon=true; true/false become booleans; never written to the run "
                                                 "folder (default: the backend's usual places)", metavar="KEY=VALUE")

    def __post_init__(self) -> None:
        object.__setattr__(self, "storage_option", tuple(self.storage_option or ()))
        self._check_types()
        if self.loader not in KINDS:
            raise ConfigError(f"--loader {self.loader}: expected one of {', '.join(KINDS)}")
        if self.kind.reads == RAW and not self.raw:
            raise ConfigError(f"--loader {self.loader} reads the dataset's image folders: pass --raw FOLDER")
        if self.kind.reads == SHARDS and not self.shards:
            raise ConfigError(f"--loader {self.loader} reads packed shards: pass --shards SHARDS_DIR (pairload pack)")
        if self.amp not in ("auto", "bf16", "fp16", "none"):
            raise ConfigError(f"--amp {self.amp}: expected auto, bf16, fp16 or none")
        if self.epochs < 1 or self.batch_size < 1:
            raise ConfigError("--epochs and --batch-size must be at least 1")
        if self.workers < 0:
            raise ConfigError(f"--workers {self.workers}: expected 0 (load in the training process) or more")
        if self.resume and not self.out:
            raise ConfigError("--resume needs --out RUN_DIR (where last.pt is)")
        if self.resume and self.overwrite:
            raise ConfigError("--resume and --overwrite contradict each other: --resume continues the run in --out, "
                              "--overwrite starts it again; pick one")
        if self.crop_border < 0:
            raise ConfigError(f"--crop-border {self.crop_border}: expected 0 (every pixel) or more pixels")
        if self.save_every_steps < 0:
            raise ConfigError(f"--save-every-steps {self.save_every_steps}: expected 0 (epoch ends only) or more")
        if self.dist_timeout <= 0:
            raise ConfigError(f"--dist-timeout {self.dist_timeout}: expected a positive number of seconds")
        if self.mix is not None:
            if not self.kind.mixes:
                raise ConfigError(f"--mix reads shard folders: use --loader {one_of(kinds_that(mixes=True))}, not "
                                  f"{self.loader}")
            mix_sources(self.mix)  # a malformed --mix is refused before anything starts
        self._check_degrade()
        self._check_clips()
        if self.storage_option:
            storage_options(self.storage_option)  # a malformed item is refused now (without echoing it)
            if not any(is_url(folder) for folder in self.folders()):
                raise ConfigError(f"--storage-option: {', '.join(self.folders()) or '--raw'} is not a URL; the "
                                  "options go to the backend of shards at a URL (--shards s3://…, --mix NAME=URL:W): "
                                  "drop them or pass a URL")

    def _check_degrade(self) -> None:
        """--degrade in its canonical form (`Degradation.describe`), so config.json and the metrics say one thing
        for one degradation; --degrade-sources as names of the --mix."""
        from ..degrade.spec import Degradation

        if self.degrade is not None:
            try:
                object.__setattr__(self, "degrade", Degradation.of(self.degrade).describe())
            except ConfigError as exc:
                raise ConfigError(f"--degrade {self.degrade}: {exc}") from None
        if self.degrade_sources is None:
            return
        if self.degrade is None:
            raise ConfigError(f"--degrade-sources {self.degrade_sources}: there is no --degrade to apply; pass "
                              "--degrade SPEC too (e.g. --degrade lowlight)")
        if not self.mix:
            raise ConfigError(f"--degrade-sources {self.degrade_sources} names sources of a --mix, and there is "
                              "none; drop it (--degrade applies to all of --shards) or pass --mix NAME=FOLDER:WEIGHT,…")
        names = [n.strip() for n in self.degrade_sources.split(",")]
        unknown = [n for n in names if n not in mix_sources(self.mix)]
        twice = [n for k, n in enumerate(names) if n in names[:k]]
        if unknown or twice:
            found = ", ".join(n or "an empty name" for n in unknown) if unknown else f"{twice[0]} named twice"
            raise ConfigError(f"--degrade-sources {self.degrade_sources}: expected some of the --mix sources "
                              f"({', '.join(mix_sources(self.mix))}), each once, separated by single commas; found "
                              f"{found}")

    def _check_clips(self) -> None:
        """--clips in its canonical form (`Clips.describe`), for a kind that reads packed shards."""
        from ..plan.clips import Clips

        if self.clips is None:
            return
        if self.kind.reads != SHARDS:
            raise ConfigError(f"--clips takes the sequences of packed shards: use --loader "
                              f"{one_of(kinds_that(reads=SHARDS))}, not {self.loader}")
        try:
            clips = Clips.of(self.clips)
        except ConfigError as exc:
            raise ConfigError(f"--clips {self.clips}: {exc}") from None
        object.__setattr__(self, "clips", None if clips is None else clips.describe())

    @property
    def frames(self) -> int:
        """Frames per clip (T) with --clips, else 1."""
        from ..plan.clips import Clips

        return Clips.of(self.clips).frames if self.clips else 1

    def degraded_sources(self) -> tuple[str, ...]:
        """--degrade-sources as names (empty: --degrade applies to every source)."""
        return tuple(filter(None, (n.strip() for n in (self.degrade_sources or "").split(","))))

    def _check_types(self) -> None:
        """Whole numbers where a count is expected (TrainConfig(crop=32.5) would fail deep inside torch), numbers
        where a number is, and no bool for either."""
        for f in fields(self):
            value = getattr(self, f.name)
            kind = str(f.type).replace(" | None", "")
            if value is None and "None" in str(f.type):
                continue
            if kind == "int" and not is_whole(value):
                raise ConfigError(f"{f.name}={value!r}: expected a whole number (int), found {type(value).__name__}",
                                  option=f.name, fix="pass an int")
            if kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ConfigError(f"{f.name}={value!r}: expected a number, found {type(value).__name__}",
                                  option=f.name, fix="pass a float")

    @property
    def kind(self) -> Kind:
        """The entry of --loader in the kinds' registry (`pairload.kinds`): what it reads, whether it mixes."""
        return KINDS[self.loader]

    def folders(self) -> list[str]:
        """The shard folders (or URLs) the run trains on: the --mix's, or --shards (none for a kind that reads the
        image folders)."""
        if self.kind.reads != SHARDS:
            return []
        if self.mix:
            return [folder for folder, _ in mix_sources(self.mix).values()]
        return [self.shards]

    def storage_options(self) -> dict:
        """--storage-option items as fsspec options (s3://: endpoint_url and region_name in client_kwargs)."""
        urls = [folder for folder in [*self.folders(), self.shards] if folder and is_url(folder)]
        return storage_options(self.storage_option, urls[0] if urls else None)

    def remote_options(self) -> dict:
        """Where the loaders over shards cache those read from URLs, and how they reach them."""
        from ..remote.cache import parse_bytes
        from ..remote.urls import default_cache_dir

        return {"cache_dir": self.cache_dir or default_cache_dir(), "cache_limit": parse_bytes(self.cache_limit),
                "storage_options": self.storage_options()}

    def plan_options(self) -> dict:
        """The training loader's planning: crop and batch (or their schedule), repeats, the mix, the degradation."""
        opts: dict = {"repeats": self.repeats, "epoch_size": self.epoch_size}
        if self.crop_schedule:
            opts["schedule"] = self.crop_schedule
        else:
            opts.update(batch_size=self.batch_size, crop=self.crop)
        if self.mix:
            opts["weights"] = {name: w for name, (_, w) in mix_sources(self.mix).items()}
        if self.degrade:
            opts.update(degrade=self.degrade, degrade_sources=self.degraded_sources())
        if self.clips:
            opts["clips"] = self.clips
        return opts

    def metric_config(self):
        """The validation metrics' options (`pairload.evaluate.MetricConfig`): 8-bit images, as BasicSR's
        validation compares."""
        from ..evaluate.metrics import MetricConfig

        return MetricConfig(crop_border=self.crop_border, y_channel=self.y_channel)

    def record(self) -> dict:
        """The options as config.json and checkpoints keep them: --storage-option values hidden."""
        doc = asdict(self)
        doc["storage_option"] = [f"{item.partition('=')[0]}={HIDDEN}" for item in self.storage_option]
        return doc


def mix_sources(spec: str) -> dict[str, tuple[str, float]]:
    """--mix "real=shards/lol:1,made=shards/made:3" -> {name: (folder, weight)}."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, eq, rest = part.partition("=")
        folder, colon, weight = rest.rpartition(":")
        try:
            if not (eq and colon and name and folder):
                raise ValueError
            value = (folder, float(weight))
        except ValueError:
            raise ConfigError(f"--mix {part!r}: expected NAME=FOLDER:WEIGHT items separated by commas, e.g. "
                              "real=shards/lol:1,made=shards/made:3") from None
        if name in out:
            raise ConfigError(f"--mix {spec}: source {name!r} is named twice (items {name}={out[name][0]}:... and "
                              f"{part}); give each source its own name")
        out[name] = value
    if not out:
        raise ConfigError("--mix is empty: expected NAME=FOLDER:WEIGHT items, e.g. "
                          "real=shards/lol:1,made=shards/made:3")
    return out


class UsageParser(argparse.ArgumentParser):
    def error(self, message: str):
        """A usage error in one line that names the command the user typed (argparse prints the whole usage)."""
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


_TYPES = {"int": int, "float": float, "str": str}


def build_parser(prog: str = "python -m pairload.train", description: str | None = None) -> argparse.ArgumentParser:
    """One flag per TrainConfig field (`batch_size` -> --batch-size), with its help, type and default."""
    ap = UsageParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        text, metavar = f.metadata["help"], f.metadata["metavar"]
        kind = str(f.type).replace(" | None", "")
        if kind == "bool":
            ap.add_argument(flag, action="store_true", default=f.default, help=text)
        elif kind == "tuple[str, ...]":  # repeatable; None when not given, a tuple in the config
            ap.add_argument(flag, action="append", metavar=metavar, help=text)
        else:
            ap.add_argument(flag, type=_TYPES[kind], default=f.default, metavar=metavar,
                            help=text if f.default is None else f"{text} (default: %(default)s)")
    return ap


def parse_args(argv: list[str] | None = None, prog: str = "python -m pairload.train",
               description: str | None = None) -> TrainConfig:
    ns = build_parser(prog, description).parse_args(argv)
    return TrainConfig(**vars(ns))
