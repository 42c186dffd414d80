"""BasicSR-family training on pairload batches (`pairload.basicsr`): the option mapping and its refusals, the dict
contract BasicSR models' `feed_data` reads, the prefetcher's next()/reset() across epochs, and a few iterations of a
model written the way basicsr's SRModel is, in BasicSR's own training loop.

The real basicsr 1.4.2 is not used: it does not install cleanly beside this stack's torch (it pulls another torch
and torchvision, and then fails to import `torchvision.transforms.functional_tensor`, which torchvision removed)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from pairload import ConfigError, make_loader
from pairload.basicsr import BasicSRBatches, loader_options
from pairload.batch import PairBatch, RawNormalize
from pairload.pack import PackOptions, pack

from basicsr_yamls import YAMLS
from conftest import make_raw

N, H, W = 12, 16, 20

# Restormer's Deraining_Restormer.yml, as basicsr's parse_options leaves it (phase, scale, rank, world_size added)
RESTORMER = {
    "name": "Deraining_Restormer", "model_type": "ImageCleanModel", "scale": 1, "num_gpu": 8, "manual_seed": 100,
    "rank": 0, "world_size": 1,
    "datasets": {"train": {
        "name": "TrainSet", "type": "Dataset_PairedImage", "dataroot_gt": "./target", "dataroot_lq": "./input",
        "geometric_augs": True, "filename_tmpl": "{}", "io_backend": {"type": "disk"}, "use_shuffle": True,
        "num_worker_per_gpu": 8, "batch_size_per_gpu": 8, "mini_batch_sizes": [8, 5, 4, 2, 1, 1],
        "iters": [92000, 64000, 48000, 36000, 36000, 24000], "gt_size": 384,
        "gt_sizes": [128, 160, 192, 256, 320, 384], "dataset_enlarge_ratio": 1, "prefetch_mode": None,
        "phase": "train", "scale": 1}},
    "train": {"total_iter": 300000},
}
# BasicSR's PairedImageDataset options (NAFNet-SIDD-like)
BASICSR = {"name": "SIDD", "type": "PairedImageDataset", "dataroot_gt": "gt.lmdb", "dataroot_lq": "lq.lmdb",
           "io_backend": {"type": "lmdb"}, "gt_size": 256, "use_hflip": True, "use_rot": True, "use_shuffle": True,
           "num_worker_per_gpu": 4, "batch_size_per_gpu": 4, "dataset_enlarge_ratio": 3, "prefetch_mode": None}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """12 pairs of 16x20 whose target is 255 - input and whose channel 0 is the pair number."""
    root = tmp_path_factory.mktemp("bsr")
    make_raw(root / "raw", N, split="train", size=(H, W))
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=64 * 1024))
    return root / "shards"


def with_train(**changes):
    opt = copy.deepcopy(BASICSR)
    for key, value in changes.items():
        if value is None:
            opt.pop(key, None)
        else:
            opt[key] = value
    return opt


def test_basicsr_options_map_key_by_key():
    assert loader_options(BASICSR) == {"crop": 256, "batch_size": 4, "augment": True, "repeats": 3, "shuffle": True,
                                       "num_workers": 4}
    full = {"manual_seed": 10, "rank": 1, "world_size": 2, "scale": 1, "datasets": {"train": BASICSR},
            "train": {"total_iter": 1000}}
    assert loader_options(full) == {**loader_options(BASICSR), "seed": 10, "rank": 1, "world_size": 2}
    assert loader_options(with_train(use_shuffle=False, dataset_enlarge_ratio=None))["shuffle"] is False
    assert loader_options(with_train(dataset_enlarge_ratio=None))["repeats"] == 1


@pytest.mark.parametrize("flags, augment", [
    ({"use_hflip": True, "use_rot": True}, True),
    ({"use_flip": True, "use_rot": True}, True),  # NAFNet's and older BasicSR's name of use_hflip
    ({"use_hflip": False, "use_rot": False}, False),
    ({}, False),
    ({"geometric_augs": True}, True),  # Restormer's: the eight orientations, uniformly
    ({"geometric_augs": False}, False),
])
def test_augmentation_maps_to_the_dihedral_group_or_nothing(flags, augment):
    opt = with_train(**{"use_hflip": None, "use_rot": None, **flags})
    assert loader_options(opt)["augment"] is augment


@pytest.mark.parametrize("flags, message", [
    ({"use_hflip": True, "use_rot": False},
     r"datasets.train: use_hflip=True, use_rot=False \(horizontal flips alone\) cannot be mapped: pairload draws all "
     r"eight orientations of the dihedral group \(augment=True\) or none; set both true \(or both false\)"),
    ({"use_hflip": False, "use_rot": True}, r"use_hflip=False, use_rot=True \(vertical flips and transposes without "
                                             r"horizontal flips \(four of the eight orientations\)\) cannot be mapped"),
    ({"use_flip": True}, r"use_flip=True, use_rot=False \(horizontal flips alone\)"),
    ({"use_hflip": True, "use_flip": False, "use_rot": True}, r"use_hflip=True but use_flip=False"),
    ({"geometric_augs": False, "use_hflip": True, "use_rot": True},
     r"geometric_augs=False but use_hflip/use_rot are True"),
    ({"use_hflip": "yes", "use_rot": True}, r"datasets.train.use_hflip='yes': expected true or false"),
])
def test_augmentations_pairload_cannot_draw_are_refused(flags, message):
    with pytest.raises(ConfigError, match=message):
        loader_options(with_train(**{"use_hflip": None, "use_rot": None, **flags}))


def test_restormer_progressive_training_becomes_a_schedule():
    opts = loader_options(RESTORMER)
    # stage i starts where the iterations of stages 0..i-1 end (Restormer's iters are stage lengths)
    assert opts == {"augment": True, "repeats": 1, "shuffle": True, "num_workers": 8, "seed": 100, "rank": 0,
                    "world_size": 1, "schedule": [(0, 128, 8), (92000, 160, 5), (156000, 192, 4), (204000, 256, 2),
                                                  (240000, 320, 1), (276000, 384, 1)]}
    short = copy.deepcopy(RESTORMER)
    short["train"]["total_iter"] = 156000  # the stages from 156000 on are never reached
    assert loader_options(short)["schedule"] == [(0, 128, 8), (92000, 160, 5)]
    short["train"]["total_iter"] = 2e5  # `total_iter: !!float 2e5`, which BasicSR takes as int(...)
    assert loader_options(short)["schedule"][-1] == (156000, 192, 4)
    capped = copy.deepcopy(RESTORMER["datasets"]["train"])  # train.py cuts stages from gt_size x batch_size_per_gpu
    capped.update(gt_size=192, batch_size_per_gpu=4)
    assert loader_options(capped)["schedule"][:4] == [(0, 128, 4), (92000, 160, 4), (156000, 192, 4),
                                                      (204000, 192, 2)]
    single = copy.deepcopy(RESTORMER["datasets"]["train"])  # Retinexformer's fixed-size training
    single.update(mini_batch_sizes=[8], iters=[300000], gt_size=128, gt_sizes=[128])
    opts = loader_options(single)
    assert (opts["crop"], opts["batch_size"]) == (128, 8) and "schedule" not in opts


@pytest.mark.parametrize("changes, message", [
    ({"random_reverse": False, "N_frames": 5},
     r"^BasicSR options datasets.train: N_frames, random_reverse not understood: pairload cannot tell whether they "
     r"change the samples; remove them from the options \(loader_options reads gt_size, "),
    ({"type": "Dataset_GaussianDenoising", "sigma_range": [0, 50], "in_ch": 3},  # the type alone is the reason
     r"^BasicSR options datasets.train.type=Dataset_GaussianDenoising: this dataset adds Gaussian noise to clean "
     r"targets; pairload reproduces only the paired datasets \(PairedImageDataset, Dataset_PairedImage: random crops "
     r"of stored pairs\); train with the repository's own loader \(python basicsr/train.py\), or pack the pairs it "
     r"would make with `pairload pack` and set type: PairedImageDataset$"),
    ({"type": "MyDataset"}, r"datasets.train.type=MyDataset: this dataset is not a paired dataset pairload knows"),
    ({"scale": 4}, r"datasets.train.scale=4: expected 1; pairload crops input and target at one size"),
    ({"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
     r"mean=\[0.5, 0.5, 0.5\], std=\[0.5, 0.5, 0.5\]: BasicSR would normalise the samples.*"
     r"BasicSRBatches\(loader, normalize=Normalize\(mean, std\)\)"),
    ({"color": "y"}, r"datasets.train.color=y: BasicSR would train on the Y channel"),
    ({"gt_size": None}, r"datasets.train: no gt_size; pairload needs the crop side \(e.g. gt_size: 128\)"),
    ({"dataset_enlarge_ratio": 0}, r"datasets.train.dataset_enlarge_ratio=0: expected a whole number, at least 1"),
    ({"gt_sizes": [128, 160], "iters": [10, 20]},
     r"datasets.train: gt_sizes, iters without mini_batch_sizes: progressive training needs mini_batch_sizes, "
     r"gt_sizes and iters, one entry per stage"),
    ({"gt_sizes": [128, 160], "iters": [10, 20], "mini_batch_sizes": [8]},
     r"mini_batch_sizes has 1 entries, gt_sizes 2, iters 2; give one entry per stage in each"),
    ({"gt_sizes": [128, 160], "iters": [10, 0], "mini_batch_sizes": [8, 4]},
     r"datasets.train.iters=\[10, 0\]: expected a list of positive whole numbers"),
])
def test_options_that_change_the_samples_are_refused(changes, message):
    with pytest.raises(ConfigError, match=message):
        loader_options(with_train(**changes))


def parsed(name: str) -> dict:
    """One option file of the four repositories as their parse_options leaves it (phase and scale copied into the
    dataset, rank and world size added)."""
    entry = YAMLS[name]
    top = copy.deepcopy(entry["top"])
    train = {**copy.deepcopy(entry["train"]), "phase": "train"}
    if top["scale"] is not None:
        train["scale"] = top["scale"]
    return {**top, "rank": 0, "world_size": 1, "datasets": {"train": train}}


@pytest.mark.parametrize("name", [n for n, e in YAMLS.items() if e["refused"] is None])
def test_every_paired_option_file_of_the_four_repositories_is_accepted(name):
    opt = parsed(name)
    train = opt["datasets"]["train"]
    notes = []
    code = loader_options(opt, progressive="code", log=notes.append)
    flips = train.get("use_hflip", train.get("use_flip", False)) and train.get("use_rot", False)
    augment = train.get("geometric_augs", flips)
    assert code == {"crop": train["gt_size"], "batch_size": train["batch_size_per_gpu"], "augment": augment,
                    "repeats": train["dataset_enlarge_ratio"], "shuffle": train.get("use_shuffle", True),
                    "num_workers": train["num_worker_per_gpu"], "seed": opt["manual_seed"], "rank": 0,
                    "world_size": 1}
    # the keys naming the folders and BasicSR's DataLoader: accepted, listed once in one line
    assert len(notes) == 1 and "\n" not in notes[0]
    listed = notes[0].split(": ", 1)[1].split(" not used")[0].split(", ")
    assert sorted(listed) == sorted(k for k in train if k in ("name", "phase", "dataroot_gt", "dataroot_lq",
                                                              "filename_tmpl", "io_backend", "prefetch_mode",
                                                              "cache_data", "meta_info_file"))
    loader = loader_options(opt, log=lambda line: None)  # progressive="loader": the stages come from the loader
    sizes = zip(train.get("mini_batch_sizes", []), train.get("gt_sizes", []), train.get("iters", []))
    stages, start = [], 0
    for batch, crop, length in sizes:
        if start < int(opt["train"]["total_iter"]):
            stages.append((start, min(crop, train["gt_size"]), min(batch, train["batch_size_per_gpu"])))
        start += length
    if len(stages) > 1:
        assert loader["schedule"] == stages and "crop" not in loader
    else:
        assert (loader["crop"], loader["batch_size"]) == (stages[0][1:] if stages else (code["crop"],
                                                                                          code["batch_size"]))


@pytest.mark.parametrize("name", [n for n, e in YAMLS.items() if e["refused"] is not None])
def test_the_other_option_files_are_refused_for_their_one_reason(name):
    opt = parsed(name)
    train, why = opt["datasets"]["train"], YAMLS[name]["refused"]
    with pytest.raises(ConfigError) as got:
        loader_options(opt, progressive="code")
    message = str(got.value)
    assert "\n" not in message and "not understood" not in message  # one line, one reason
    expected = {"type": f"BasicSR options datasets.train.type={train['type']}: this dataset ",
                "scale": f"BasicSR options.scale={opt['scale']}: expected 1",
                "flips": "cannot be mapped: pairload draws all eight orientations"}[why]
    assert expected in message
    if why == "type":
        assert train["type"] in str(got.value) and message.count(train["type"]) == 1


def test_progressive_code_delivers_full_batches_for_the_block_in_train_py():
    assert loader_options(RESTORMER, progressive="code") == {
        "augment": True, "repeats": 1, "shuffle": True, "num_workers": 8, "seed": 100, "rank": 0, "world_size": 1,
        "crop": 384, "batch_size": 8}
    with pytest.raises(ConfigError, match=r"^loader_options: progressive='stages': expected 'loader' \(the loader "
                                          r"delivers each stage's batches\) or 'code'"):
        loader_options(RESTORMER, progressive="stages")
    broken = copy.deepcopy(RESTORMER)
    broken["datasets"]["train"]["iters"] = [1, 2]  # their block would index the stages: still checked
    with pytest.raises(ConfigError, match="mini_batch_sizes has 6 entries, gt_sizes 6, iters 2"):
        loader_options(broken, progressive="code")


def test_data_parallel_loads_num_gpu_times_the_rows_as_basicsr_does():
    # no launcher (dist: false) and num_gpu 8: BasicSR's DataLoader gives batch_size_per_gpu x 8 rows with 8 x the
    # workers and DataParallel splits them; Restormer's block then cuts a smaller mini-batch from the first rows only
    dp = {**copy.deepcopy(RESTORMER), "dist": False, "num_gpu": 8}
    train = RESTORMER["datasets"]["train"]
    code = loader_options(dp, progressive="code")
    assert (code["batch_size"], code["num_workers"]) == (8 * train["batch_size_per_gpu"], 8 * 8)
    staged = loader_options(dp)["schedule"]
    one = loader_options(RESTORMER)["schedule"]
    assert [b for _, _, b in staged] == [b * 8 if b == train["batch_size_per_gpu"] else b for _, _, b in one]
    assert loader_options({**dp, "dist": True})["schedule"] == one  # a launcher: each rank loads its own batch


def test_unused_keys_go_to_the_modules_logger_by_default(caplog):
    with caplog.at_level("INFO", logger="pairload.basicsr.options"):
        loader_options(BASICSR)
    assert [r.getMessage() for r in caplog.records] == [
        "BasicSR options datasets.train: name, dataroot_gt, dataroot_lq, io_backend, prefetch_mode not used: they name "
        "the source folders or how BasicSR's own DataLoader reads them, which the shard folder and the pairload "
        "loader replace (the samples are the same)"]


def test_top_level_options_are_checked():
    with pytest.raises(ConfigError, match=r"^BasicSR options.scale=2: expected 1"):
        loader_options({"scale": 2, "datasets": {"train": BASICSR}})
    with pytest.raises(ConfigError, match=r"^BasicSR options: no datasets: train: section"):
        loader_options({"datasets": {"val": BASICSR}})
    with pytest.raises(ConfigError, match=r"^BasicSR options train.total_iter=0: expected a whole number"):
        loader_options({"datasets": {"train": BASICSR}, "train": {"total_iter": 0}})


def test_degrade_maps_to_the_loaders_degrade(shards):
    assert "degrade" not in loader_options(BASICSR)
    as_text = loader_options(with_train(degrade="lowlight, gamma=2..3"))
    as_dict = loader_options(with_train(degrade={"model": "lowlight", "gamma": [2, 3]}))  # a YAML mapping
    assert as_text == as_dict == {**loader_options(BASICSR), "degrade": "lowlight,gamma=2..3"}
    assert loader_options(with_train(degrade="lowlight", degrade_sources=["made"]))["degrade_sources"] == ("made",)
    opts = loader_options(with_train(gt_size=8, batch_size_per_gpu=4, num_worker_per_gpu=0, degrade="lowlight"))
    data = BasicSRBatches(make_loader("ram", shards, **opts)).next()
    with make_loader("ram", shards, batch_size=4, crop=8, augment=True, repeats=3, degrade="lowlight") as loader:
        batch = next(iter(loader))
        assert data["lq_path"] == batch.keys
        assert torch.allclose(data["lq"], batch.low.float() / 255) and torch.allclose(data["gt"], batch.high / 255)
    assert not torch.allclose(data["lq"], 1 - data["gt"])  # not the stored input (the target is 255 - input)


@pytest.mark.parametrize("changes, message", [
    ({"degrade": "darken"}, r"^BasicSR options datasets.train.degrade='darken': degradation 'darken': expected one "
                            r"of lowlight, "),
    ({"degrade": {"gamma": [2, 3]}}, r"datasets.train.degrade=\{'gamma': \[2, 3\]\}: degradation .*: expected a "
                                     r"\"model\" key"),
    ({"degrade_sources": ["made"]}, r"datasets.train.degrade_sources=\['made'\]: there is no degrade to apply; "
                                     r"add degrade: lowlight \(for example\), or remove degrade_sources"),
    ({"degrade": "lowlight", "degrade_sources": 3}, r"datasets.train.degrade_sources=3: expected a list of the mixed "
                                                     r"sources' names"),
])
def test_degrade_mistakes_name_the_key(changes, message):
    with pytest.raises(ConfigError, match=message):
        loader_options(with_train(**changes))


def test_schedule_boundaries_reach_the_batches(shards):
    """Stages of 4 and 3 iterations: steps 0-3 are 4 windows of 8, then 2 of 12. 12 pairs: epoch 0 is steps 0-2,
    so the boundary (step 4, iteration 5) falls after epoch 1's first batch."""
    train = with_train(gt_size=12, batch_size_per_gpu=4, dataset_enlarge_ratio=None, num_worker_per_gpu=None,
                       mini_batch_sizes=[4, 2], gt_sizes=[8, 12], iters=[4, 3])
    assert loader_options(train)["schedule"] == [(0, 8, 4), (4, 12, 2)]
    loader = make_loader("ram", shards, **loader_options(train))
    prefetcher = BasicSRBatches(loader)
    shapes = []
    for epoch in range(2):
        prefetcher.set_epoch(epoch)
        shapes.append([tuple(b["lq"].shape) for b in prefetcher])
    assert shapes == [[(4, 3, 8, 8)] * 3, [(4, 3, 8, 8)] + [(2, 3, 12, 12)] * 4]


def check_pairs(data: dict, crop: int) -> None:
    """lq and gt are float32 windows of one pair, cut and oriented alike (gt = 1 - lq exactly in 8 bits)."""
    lq, gt = data["lq"], data["gt"]
    assert lq.dtype == gt.dtype == torch.float32 and lq.device.type == "cpu"
    assert lq.shape == gt.shape == (len(data["lq_path"]), 3, crop, crop) and lq.is_contiguous()
    assert 0 <= float(lq.min()) and float(lq.max()) <= 1 and 0 <= float(gt.min()) and float(gt.max()) <= 1
    low, high = (lq * 255).round().to(torch.int64), (gt * 255).round().to(torch.int64)
    assert torch.equal(low + high, torch.full_like(low, 255))
    assert torch.allclose(lq * 255, low.float(), atol=1e-4)  # x / 255, not some other scaling
    assert data["gt_path"] == data["lq_path"] and all(isinstance(p, str) for p in data["lq_path"])
    for j, key in enumerate(data["lq_path"]):
        assert (low[j, 0] == int(key)).all()  # the row's key names the pair whose pixels it holds


def test_batches_are_basicsr_dicts(shards):
    loader = make_loader("ram", shards, batch_size=4, crop=8, seed=1)
    data = BasicSRBatches(loader).next()
    assert set(data) == {"lq", "gt", "lq_path", "gt_path"}
    check_pairs(data, 8)
    assert len(set(data["lq_path"])) == 4


def test_sixteen_bit_members_are_divided_by_their_range(tmp_path):
    from pairload.format.members import Member, Members
    from typed_split import write_typed_split

    rawlike = Members(Member("uint16", 4), Member("uint16", 3), scale=2)
    arrays = write_typed_split(tmp_path / "s", rawlike, [(6, 8)] * 3)
    loader = make_loader("ram", tmp_path / "s", batch_size=1, crop=None, augment=False, shuffle=False)
    for data in BasicSRBatches(loader):
        low, high = arrays[data["lq_path"][0]]
        assert data["lq"].shape == (1, 4, 6, 8) and data["gt"].shape == (1, 3, 12, 16)
        assert torch.allclose(data["lq"][0], torch.from_numpy(low.astype(np.float64) / 65535).permute(2, 0, 1).float())
        assert torch.allclose(data["gt"][0], torch.from_numpy(high.astype(np.float64) / 65535).permute(2, 0, 1).float())


def test_normalize_is_checked_and_used(shards):
    with pytest.raises(ConfigError, match=r"BasicSRBatches: normalize=.*: expected an object with pair\(batch\)"):
        BasicSRBatches(make_loader("ram", shards, batch_size=4, crop=8), normalize=lambda x: x)
    batch = PairBatch(low=torch.zeros(1, 4, 2, 2, dtype=torch.uint16), high=torch.zeros(1, 3, 4, 4,
                      dtype=torch.uint16), keys=["k"], padded=torch.zeros(1, dtype=torch.bool))
    with pytest.raises(ConfigError, match="RawNormalize: the batch carries no sensor facts"):
        BasicSRBatches(None, normalize=RawNormalize()).as_dict(batch)


def keys_of(prefetcher) -> list[list[str]]:
    out = []
    while (data := prefetcher.next()) is not None:
        out.append(data["lq_path"])
    return out


def test_next_and_reset_follow_basicsr_prefetchers_across_epochs(shards):
    loader = make_loader("ram", shards, batch_size=4, crop=8, seed=2)
    prefetcher = BasicSRBatches(loader)
    assert len(prefetcher) == 3
    first = keys_of(prefetcher)  # usable right away, like CPUPrefetcher
    assert len(first) == 3 and sorted(k for b in first for k in b) == [f"{i:05d}" for i in range(N)]
    assert prefetcher.next() is None and prefetcher.next() is None  # the epoch stays over until reset()
    prefetcher.reset()
    assert keys_of(prefetcher) == first  # the same epoch again
    prefetcher.reset()
    prefetcher.next()
    prefetcher.reset()  # half-way: the epoch starts anew
    assert keys_of(prefetcher) == first
    prefetcher.set_epoch(1)
    prefetcher.reset()
    second = keys_of(prefetcher)
    assert len(second) == 3 and second != first and sorted(sum(second, [])) == sorted(sum(first, []))
    assert [d["lq_path"] for d in prefetcher] == second  # iterating gives one epoch
    prefetcher.close()


class TinySRModel:
    """A model written the way basicsr.models.sr_model.SRModel is: `feed_data` moves data['lq'] and data['gt'] to
    its device, `optimize_parameters` runs an L1 pixel loss and one optimizer step, `log_dict` holds the loss."""

    def __init__(self, device: torch.device):
        self.device = device
        torch.manual_seed(0)
        self.net_g = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1)).to(device)
        self.cri_pix = nn.L1Loss()
        self.optimizer_g = torch.optim.Adam(self.net_g.parameters(), lr=1e-2)
        self.log_dict: dict[str, float] = {}

    def feed_data(self, data: dict) -> None:
        self.lq = data["lq"].to(self.device)
        if "gt" in data:
            self.gt = data["gt"].to(self.device)

    def optimize_parameters(self, current_iter: int) -> None:
        self.optimizer_g.zero_grad()
        self.output = self.net_g(self.lq)
        l_pix = self.cri_pix(self.output, self.gt)
        l_pix.backward()
        self.optimizer_g.step()
        self.log_dict = {"l_pix": l_pix.item()}


def test_basicsr_training_loop_runs_on_pairload_batches(shards):
    """BasicSR's train.py loop (set_epoch, reset, next until None, break at total_iter) over two epochs."""
    opt = {"manual_seed": 5, "scale": 1, "rank": 0, "world_size": 1, "train": {"total_iter": 5},
           "datasets": {"train": with_train(gt_size=8, batch_size_per_gpu=4, num_worker_per_gpu=0,
                                            dataset_enlarge_ratio=1)}}
    train_loader = make_loader("ram", shards, **loader_options(opt))
    prefetcher = BasicSRBatches(train_loader)
    model = TinySRModel(torch.device("cpu"))
    before = [p.detach().clone() for p in model.net_g.parameters()]
    total_iters, current_iter, losses, epochs = opt["train"]["total_iter"], 0, [], set()
    for epoch in range(0, 3):
        train_loader.set_epoch(epoch)
        prefetcher.reset()
        train_data = prefetcher.next()
        while train_data is not None:
            current_iter += 1
            if current_iter > total_iters:
                break
            model.feed_data(train_data)
            model.optimize_parameters(current_iter)
            losses.append(model.log_dict["l_pix"])
            epochs.add(epoch)
            train_data = prefetcher.next()
    assert len(losses) == total_iters and epochs == {0, 1}  # 3 batches per epoch
    assert all(np.isfinite(losses)) and losses[0] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.net_g.parameters()))
    prefetcher.close()
