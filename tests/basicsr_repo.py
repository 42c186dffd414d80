"""A tiny BasicSR-shaped repository, written into a test's folder, for `python -m pairload.basicsr`.

Its layout and names are those of BasicSR-family code (`basicsr/train.py` with `parse_options`,
`create_train_val_dataloader`, `main()`; `basicsr/data` with `create_dataset`/`create_dataloader`,
`data_sampler.EnlargedSampler`, `prefetch_dataloader.CPUPrefetcher`/`CUDAPrefetcher`; `basicsr/models`
`create_model`; `basicsr/utils` with the root logger and `MessageLogger`; an options YAML in `Options/`), written for
these tests (no code of those repositories): style "restormer" is a Restormer/Retinexformer/NAFNet-shaped train.py
(a `while current_iter <= total_iters` loop with the progressive block, automatic resume from the newest file of
experiments/<name>/training_states read as `int(name[:-6])`), style "basicsr13" a BasicSR >= 1.3-shaped one
(`train_pipeline(root_path)`, `build_dataset`/`build_dataloader`/`build_model`, `--auto_resume`, a `for epoch in
range(start_epoch, total_epochs + 1)` loop). Their own validation set reads PNG folders with cv2.

The model records what it was fed: each iteration's lq and gt, as uint8 (x 255), one JSON line in the file named by
the environment variable TINY_FED (default experiments/<name>/fed.jsonl). TINY_STOP_AT=k ends the process
(os._exit(17), no clean-up) once iteration k has run: a killed run."""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml

UTILS = '''
import datetime
import logging
import os
import random
import time

import numpy as np
import torch

initialized_logger = {}


def get_dist_info():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def init_dist(launcher, backend="gloo"):
    torch.distributed.init_process_group(backend=backend)


def get_root_logger(logger_name="basicsr", log_level=logging.INFO, log_file=None):
    logger = logging.getLogger(logger_name)
    if logger_name in initialized_logger:
        return logger
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    rank, _ = get_dist_info()
    if rank != 0:
        logger.setLevel("ERROR")
    elif log_file is not None:
        logger.setLevel(log_level)
        file_handler = logging.FileHandler(log_file, "w")
        file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s: %(message)s"))
        logger.addHandler(file_handler)
    initialized_logger[logger_name] = True
    return logger


def get_time_str():
    return time.strftime("%Y%m%d_%H%M%S", time.localtime())


def set_random_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_exp_dirs(opt):
    if get_dist_info()[0] != 0:  # @master_only in BasicSR: another rank would rename the folder rank 0 just made
        return
    path = opt["path"]
    if os.path.exists(path["experiments_root"]):
        os.rename(path["experiments_root"], path["experiments_root"] + "_archived_" + get_time_str())
    for key in ("experiments_root", "models", "training_states"):
        os.makedirs(path[key], exist_ok=True)


def check_resume(opt, resume_iter):
    pass


def scandir(folder, suffix):
    return [name for name in sorted(os.listdir(folder)) if name.endswith(suffix)]


class MessageLogger:
    def __init__(self, opt, start_iter=1, tb_logger=None):
        self.exp_name, self.start_iter = opt["name"], start_iter
        self.logger = get_root_logger()

    def __call__(self, log_vars):
        epoch, current_iter, lrs = log_vars.pop("epoch"), log_vars.pop("iter"), log_vars.pop("lrs")
        message = f"[{self.exp_name[:5]}..][epoch:{epoch:3d}, iter:{current_iter:8,d}, lr:({lrs[0]:.3e},)] "
        if "time" in log_vars:
            message += f"[eta: 0:00:00, time (data): {log_vars.pop('time'):.3f} ({log_vars.pop('data_time'):.3f})] "
        for k, v in log_vars.items():
            message += f"{k}: {v:.4e} "
        self.logger.info(message)
'''

OPTIONS = '''
import argparse
import os
import random
from os import path as osp

import yaml

from basicsr.utils import get_dist_info, init_dist, set_random_seed


def parse(opt_path, is_train=True):
    with open(opt_path) as f:
        opt = yaml.safe_load(f)
    opt["is_train"] = is_train
    for phase, dataset in opt["datasets"].items():
        dataset["phase"] = phase.split("_")[0]
        dataset["scale"] = opt["scale"]
    root = osp.abspath(osp.join(__file__, osp.pardir, osp.pardir, osp.pardir))
    experiments_root = osp.join(root, "experiments", opt["name"])
    opt["path"].update(root=root, experiments_root=experiments_root, models=osp.join(experiments_root, "models"),
                       training_states=osp.join(experiments_root, "training_states"), log=experiments_root)
    return opt


def parse_options(root_path, is_train=True):
    parser = argparse.ArgumentParser()
    parser.add_argument("-opt", type=str, required=True)
    parser.add_argument("--launcher", choices=["none", "pytorch"], default="none")
    parser.add_argument("--auto_resume", action="store_true")
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    opt = parse(args.opt, is_train)
    opt["dist"] = args.launcher != "none"
    if opt["dist"]:
        init_dist(args.launcher)
    opt["rank"], opt["world_size"] = get_dist_info()
    opt["auto_resume"] = args.auto_resume
    set_random_seed(opt["manual_seed"] + opt["rank"])
    return opt, args


def copy_opt_file(opt_file, experiments_root):
    pass


def dict2str(opt):
    return str(opt)
'''

DATA = '''
import os

import cv2
import numpy as np
import torch
import torch.utils.data


class Dataset_PairedImage(torch.utils.data.Dataset):
    """Whole validation pairs in [0, 1] (the tests never train through it: pairload replaces the train phase)."""

    def __init__(self, opt):
        self.lq, self.gt = opt["dataroot_lq"], opt["dataroot_gt"]
        self.names = sorted(os.listdir(self.gt))

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        read = lambda folder: torch.from_numpy(
            cv2.imread(os.path.join(folder, self.names[i]))[..., ::-1].astype(np.float32) / 255).permute(2, 0, 1)
        return {"lq": read(self.lq), "gt": read(self.gt), "lq_path": self.names[i]}


def create_dataset(dataset_opt):
    if dataset_opt["phase"] == "train":
        raise RuntimeError("the train phase's dataset was built by the repository's own code")
    return Dataset_PairedImage(dataset_opt)


def create_dataloader(dataset, dataset_opt, num_gpu=1, dist=False, sampler=None, seed=None):
    if sampler is not None:
        raise RuntimeError("the train phase's dataloader was built by the repository's own code")
    return torch.utils.data.DataLoader(dataset, batch_size=1, shuffle=False)


build_dataset, build_dataloader = create_dataset, create_dataloader
'''

SAMPLER = '''
class EnlargedSampler:
    def __init__(self, dataset, num_replicas, rank, ratio=1):
        raise RuntimeError("the train phase's sampler was built by the repository's own code")
'''

PREFETCH = '''
class CPUPrefetcher:
    def __init__(self, loader):
        raise RuntimeError("the train phase's prefetcher was built by the repository's own code")


class CUDAPrefetcher(CPUPrefetcher):
    def __init__(self, loader, opt):
        raise RuntimeError("the train phase's prefetcher was built by the repository's own code")
'''

MODELS = '''
import copy
import importlib
import json
import os
from os import path as osp

import numpy as np
import torch

from basicsr.utils import get_root_logger


class TinyModel:
    def __init__(self, opt):
        self.opt = opt
        self.device = torch.device("cuda" if opt["num_gpu"] != 0 else "cpu")
        torch.manual_seed(0)
        self.net_g = torch.nn.Conv2d(3, 3, 1).to(self.device)
        self.optimizer_g = torch.optim.Adam(self.net_g.parameters(), lr=1e-3)
        self.fed = os.environ.get("TINY_FED") or osp.join(opt["path"]["experiments_root"], "fed.jsonl")
        self.log_dict = {}

    def feed_train_data(self, data):
        self.lq, self.gt = data["lq"].to(self.device), data["gt"].to(self.device)

    def feed_data(self, data):
        self.feed_train_data(data)

    def optimize_parameters(self, current_iter):
        with open(self.fed, "a") as f:
            as_bytes = lambda x: (x * 255).round().to(torch.uint8).cpu().tolist()
            f.write(json.dumps({"iter": current_iter, "rank": self.opt["rank"], "lq": as_bytes(self.lq),
                                "gt": as_bytes(self.gt)}) + "\\n")
        self.optimizer_g.zero_grad()
        loss = (self.net_g(self.lq) - self.gt).abs().mean()
        loss.backward()
        self.optimizer_g.step()
        self.log_dict = {"l_pix": loss.item()}
        if os.environ.get("TINY_STOP_AT") == str(current_iter):
            os._exit(17)

    def update_learning_rate(self, current_iter, warmup_iter=-1):
        pass

    def get_current_learning_rate(self):
        return [self.optimizer_g.param_groups[0]["lr"]]

    def get_current_log(self):
        return self.log_dict

    def save(self, epoch, current_iter, **kwargs):
        if current_iter != -1:
            torch.save(self.net_g.state_dict(), osp.join(self.opt["path"]["models"], f"net_g_{current_iter}.pth"))
        self.save_training_state(epoch, current_iter)

    def save_training_state(self, epoch, current_iter, **kwargs):
        if current_iter != -1 and self.opt["rank"] == 0:
            state = {"epoch": epoch, "iter": current_iter, "optimizers": [self.optimizer_g.state_dict()],
                     "best_metric": {"psnr": 0, "iter": 0}}
            torch.save(state, osp.join(self.opt["path"]["training_states"], f"{current_iter}.state"))

    def resume_training(self, resume_state):
        self.optimizer_g.load_state_dict(resume_state["optimizers"][0])

    def validation(self, dataloader, current_iter, tb_logger, save_img=False, *args):
        metrics = self.opt["val"].get("metrics")
        if metrics:  # as their models: each metric by its type name from basicsr.metrics, on tensor2img's images
            metric_module = importlib.import_module("basicsr.metrics")
            results = {name: 0.0 for name in metrics}
            with torch.no_grad():
                for d in dataloader:
                    out = self.net_g(d["lq"].to(self.device))
                    sr_img, gt_img = (to_img(t) for t in (out, d["gt"]))
                    for name, opt_ in copy.deepcopy(metrics).items():
                        results[name] += getattr(metric_module, opt_.pop("type"))(sr_img, gt_img, **opt_)
            log_str = f"Validation ValSet,"
            for name in results:
                results[name] /= len(dataloader)
                log_str += f"\t # {name}: {results[name]:.4f}"
            get_root_logger().info(log_str)
            return results[name]
        with torch.no_grad():
            l1 = [float((self.net_g(d["lq"].to(self.device)) - d["gt"].to(self.device)).abs().mean())
                  for d in dataloader]
        get_root_logger().info(f"Validation ValSet, iter {current_iter}: l1 {sum(l1) / len(l1):.4f} over "
                               f"{len(l1)} images")
        return sum(l1) / len(l1)


def to_img(t):
    """tensor2img's form: the first image, clamped, x 255, rounded, uint8 H x W x C, BGR."""
    a = t[0].detach().float().clamp(0, 1).cpu().numpy().transpose(1, 2, 0)[..., ::-1]
    return (a * 255.0).round().astype(np.uint8)


def create_model(opt):
    return TinyModel(opt)


build_model = create_model
'''

# Restormer/Retinexformer/NAFNet-shaped: the names bound by `from x import y`, automatic resume from the newest
# training state, the progressive block cutting each stage's rows and window from the loaded batch
TRAIN_RESTORMER = '''
import argparse
import logging
import math
import os
import random
from os import path as osp

import numpy as np
import torch

from basicsr.data import create_dataloader, create_dataset
from basicsr.data.data_sampler import EnlargedSampler
from basicsr.data.prefetch_dataloader import CPUPrefetcher, CUDAPrefetcher
from basicsr.models import create_model
from basicsr.utils import (MessageLogger, check_resume, get_dist_info, get_root_logger, get_time_str, init_dist,
                           make_exp_dirs, set_random_seed)
from basicsr.utils.options import parse


def parse_options(is_train=True):
    parser = argparse.ArgumentParser()
    parser.add_argument("-opt", type=str, required=True)
    parser.add_argument("--launcher", choices=["none", "pytorch"], default="none")
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    opt = parse(args.opt, is_train=is_train)
    opt["dist"] = args.launcher != "none"
    if opt["dist"]:
        init_dist(args.launcher)
    opt["rank"], opt["world_size"] = get_dist_info()
    set_random_seed(opt["manual_seed"] + opt["rank"])
    return opt


def create_train_val_dataloader(opt, logger):
    train_loader, val_loader = None, None
    for phase, dataset_opt in opt["datasets"].items():
        if phase == "train":
            dataset_enlarge_ratio = dataset_opt.get("dataset_enlarge_ratio", 1)
            train_set = create_dataset(dataset_opt)
            train_sampler = EnlargedSampler(train_set, opt["world_size"], opt["rank"], dataset_enlarge_ratio)
            train_loader = create_dataloader(train_set, dataset_opt, num_gpu=opt["num_gpu"], dist=opt["dist"],
                                             sampler=train_sampler, seed=opt["manual_seed"])
            num_iter_per_epoch = math.ceil(
                len(train_set) * dataset_enlarge_ratio / (dataset_opt["batch_size_per_gpu"] * opt["world_size"]))
            total_iters = int(opt["train"]["total_iter"])
            total_epochs = math.ceil(total_iters / (num_iter_per_epoch))
            logger.info(f"Training statistics: images {len(train_set)}, iters per epoch {num_iter_per_epoch}, "
                        f"epochs {total_epochs}")
        elif phase == "val":
            val_set = create_dataset(dataset_opt)
            val_loader = create_dataloader(val_set, dataset_opt, num_gpu=opt["num_gpu"], dist=opt["dist"],
                                           sampler=None, seed=opt["manual_seed"])
        else:
            raise ValueError(f"Dataset phase {phase} is not recognized.")
    return train_loader, train_sampler, val_loader, total_epochs, total_iters


def main():
    opt = parse_options(is_train=True)
    state_folder_path = "experiments/{}/training_states/".format(opt["name"])
    try:
        states = os.listdir(state_folder_path)
    except OSError:
        states = []
    if len(states) > 0:
        max_state_file = "{}.state".format(max([int(x[0:-6]) for x in states]))
        opt["path"]["resume_state"] = os.path.join(state_folder_path, max_state_file)
    if opt["path"].get("resume_state"):
        resume_state = torch.load(opt["path"]["resume_state"], map_location="cpu", weights_only=False)
    else:
        resume_state = None
    if resume_state is None:
        make_exp_dirs(opt)
    logger = get_root_logger(logger_name="basicsr", log_level=logging.INFO,
                             log_file=osp.join(opt["path"]["log"], f"train_{opt['name']}_{get_time_str()}.log"))
    train_loader, train_sampler, val_loader, total_epochs, total_iters = create_train_val_dataloader(opt, logger)
    if resume_state:
        check_resume(opt, resume_state["iter"])
        model = create_model(opt)
        model.resume_training(resume_state)
        logger.info(f"Resuming training from epoch: {resume_state['epoch']}, iter: {resume_state['iter']}.")
        start_epoch, current_iter = resume_state["epoch"], resume_state["iter"]
    else:
        model = create_model(opt)
        start_epoch, current_iter = 0, 0
    msg_logger = MessageLogger(opt, current_iter)
    prefetch_mode = opt["datasets"]["train"].get("prefetch_mode")
    if prefetch_mode is None or prefetch_mode == "cpu":
        prefetcher = CPUPrefetcher(train_loader)
    else:
        prefetcher = CUDAPrefetcher(train_loader, opt)

    iters = opt["datasets"]["train"].get("iters")
    batch_size = opt["datasets"]["train"].get("batch_size_per_gpu")
    mini_batch_sizes = opt["datasets"]["train"].get("mini_batch_sizes")
    gt_size = opt["datasets"]["train"].get("gt_size")
    mini_gt_sizes = opt["datasets"]["train"].get("gt_sizes")
    groups = np.array([sum(iters[0:i + 1]) for i in range(0, len(iters))])
    scale = opt["scale"]
    epoch = start_epoch
    while current_iter <= total_iters:
        train_sampler.set_epoch(epoch)
        prefetcher.reset()
        train_data = prefetcher.next()
        while train_data is not None:
            current_iter += 1
            if current_iter > total_iters:
                break
            model.update_learning_rate(current_iter, warmup_iter=opt["train"].get("warmup_iter", -1))
            # the stage of this iteration: the first whose cumulative end is not passed
            j = ((current_iter > groups) != True).nonzero()[0]  # noqa: E712
            bs_j = len(groups) - 1 if len(j) == 0 else j[0]
            mini_gt_size, mini_batch_size = mini_gt_sizes[bs_j], mini_batch_sizes[bs_j]
            lq, gt = train_data["lq"], train_data["gt"]
            if mini_batch_size < batch_size:
                rows = random.sample(range(0, batch_size), k=mini_batch_size)
                lq, gt = lq[rows], gt[rows]
            if mini_gt_size < gt_size:
                x0 = int((gt_size - mini_gt_size) * random.random())
                y0 = int((gt_size - mini_gt_size) * random.random())
                lq = lq[:, :, x0:x0 + mini_gt_size, y0:y0 + mini_gt_size]
                gt = gt[:, :, x0 * scale:(x0 + mini_gt_size) * scale, y0 * scale:(y0 + mini_gt_size) * scale]
            model.feed_train_data({"lq": lq, "gt": gt})
            model.optimize_parameters(current_iter)
            if current_iter % opt["logger"]["print_freq"] == 0:
                log_vars = {"epoch": epoch, "iter": current_iter, "lrs": model.get_current_learning_rate(),
                            "time": 0.01, "data_time": 0.001}
                log_vars.update(model.get_current_log())
                msg_logger(log_vars)
            if current_iter % opt["logger"]["save_checkpoint_freq"] == 0:
                logger.info("Saving models and training states.")
                model.save(epoch, current_iter)
            if opt.get("val") is not None and current_iter % opt["val"]["val_freq"] == 0:
                model.validation(val_loader, current_iter, None, opt["val"]["save_img"])
            train_data = prefetcher.next()
        epoch += 1
    logger.info("End of training.")
    model.save(epoch=-1, current_iter=-1)


if __name__ == "__main__":
    main()
'''

# BasicSR >= 1.3-shaped: train_pipeline(root_path), build_*, --auto_resume, an epoch loop bounded by total_epochs
TRAIN_BASICSR13 = '''
import logging
import math
import time
from os import path as osp

import torch

from basicsr.data import build_dataloader, build_dataset
from basicsr.data.data_sampler import EnlargedSampler
from basicsr.data.prefetch_dataloader import CPUPrefetcher, CUDAPrefetcher
from basicsr.models import build_model
from basicsr.utils import (MessageLogger, check_resume, get_root_logger, get_time_str, make_exp_dirs, scandir)
from basicsr.utils.options import copy_opt_file, dict2str, parse_options


def create_train_val_dataloader(opt, logger):
    train_loader, val_loaders = None, []
    for phase, dataset_opt in opt["datasets"].items():
        if phase == "train":
            dataset_enlarge_ratio = dataset_opt.get("dataset_enlarge_ratio", 1)
            train_set = build_dataset(dataset_opt)
            train_sampler = EnlargedSampler(train_set, opt["world_size"], opt["rank"], dataset_enlarge_ratio)
            train_loader = build_dataloader(train_set, dataset_opt, num_gpu=opt["num_gpu"], dist=opt["dist"],
                                            sampler=train_sampler, seed=opt["manual_seed"])
            num_iter_per_epoch = math.ceil(
                len(train_set) * dataset_enlarge_ratio / (dataset_opt["batch_size_per_gpu"] * opt["world_size"]))
            total_iters = int(opt["train"]["total_iter"])
            total_epochs = math.ceil(total_iters / (num_iter_per_epoch))
            logger.info(f"Training statistics: iters per epoch {num_iter_per_epoch}, epochs {total_epochs}")
        elif phase.split("_")[0] == "val":
            val_set = build_dataset(dataset_opt)
            val_loaders.append(build_dataloader(val_set, dataset_opt, num_gpu=opt["num_gpu"], dist=opt["dist"],
                                                sampler=None, seed=opt["manual_seed"]))
        else:
            raise ValueError(f"Dataset phase {phase} is not recognized.")
    return train_loader, train_sampler, val_loaders, total_epochs, total_iters


def load_resume_state(opt):
    resume_state_path = None
    if opt["auto_resume"]:
        state_path = osp.join("experiments", opt["name"], "training_states")
        if osp.isdir(state_path):
            states = list(scandir(state_path, suffix="state"))
            if len(states) != 0:
                states = [float(v.split(".state")[0]) for v in states]
                resume_state_path = osp.join(state_path, f"{max(states):.0f}.state")
                opt["path"]["resume_state"] = resume_state_path
    elif opt["path"].get("resume_state"):
        resume_state_path = opt["path"]["resume_state"]
    if resume_state_path is None:
        return None
    resume_state = torch.load(resume_state_path, map_location="cpu", weights_only=False)
    check_resume(opt, resume_state["iter"])
    return resume_state


def train_pipeline(root_path):
    opt, args = parse_options(root_path, is_train=True)
    opt["root_path"] = root_path
    resume_state = load_resume_state(opt)
    if resume_state is None:
        make_exp_dirs(opt)
    copy_opt_file(args.opt, opt["path"]["experiments_root"])
    log_file = osp.join(opt["path"]["log"], f"train_{opt['name']}_{get_time_str()}.log")
    logger = get_root_logger(logger_name="basicsr", log_level=logging.INFO, log_file=log_file)
    logger.info(dict2str(opt))
    train_loader, train_sampler, val_loaders, total_epochs, total_iters = create_train_val_dataloader(opt, logger)
    model = build_model(opt)
    if resume_state:
        model.resume_training(resume_state)
        start_epoch, current_iter = resume_state["epoch"], resume_state["iter"]
    else:
        start_epoch, current_iter = 0, 0
    msg_logger = MessageLogger(opt, current_iter)
    prefetch_mode = opt["datasets"]["train"].get("prefetch_mode")
    if prefetch_mode is None or prefetch_mode == "cpu":
        prefetcher = CPUPrefetcher(train_loader)
    else:
        prefetcher = CUDAPrefetcher(train_loader, opt)
    for epoch in range(start_epoch, total_epochs + 1):
        train_sampler.set_epoch(epoch)
        prefetcher.reset()
        train_data = prefetcher.next()
        while train_data is not None:
            current_iter += 1
            if current_iter > total_iters:
                break
            model.update_learning_rate(current_iter, warmup_iter=opt["train"].get("warmup_iter", -1))
            model.feed_data(train_data)
            model.optimize_parameters(current_iter)
            if current_iter % opt["logger"]["print_freq"] == 0:
                log_vars = {"epoch": epoch, "iter": current_iter, "lrs": model.get_current_learning_rate(),
                            "time": 0.01, "data_time": 0.001}
                log_vars.update(model.get_current_log())
                msg_logger(log_vars)
            if current_iter % opt["logger"]["save_checkpoint_freq"] == 0:
                model.save(epoch, current_iter)
            if opt.get("val") is not None and current_iter % opt["val"]["val_freq"] == 0:
                for val_loader in val_loaders:
                    model.validation(val_loader, current_iter, None, opt["val"]["save_img"])
            train_data = prefetcher.next()
    logger.info("End of training.")
    model.save(epoch=-1, current_iter=-1)


if __name__ == "__main__":
    train_pipeline(osp.abspath(osp.join(__file__, osp.pardir, osp.pardir)))
'''


def options(raw: Path, **train_changes) -> dict:
    """The repository's options YAML (as a dict): 8x8 crops of 4 pairs, Restormer's progressive keys with a second
    stage of 2 windows of 6 from iteration 7 on, validation every 5 iterations, a checkpoint every 4."""
    train = {"name": "TrainSet", "type": "Dataset_PairedImage", "dataroot_gt": str(raw / "train" / "high"),
             "dataroot_lq": str(raw / "train" / "low"), "geometric_augs": True, "filename_tmpl": "{}",
             "io_backend": {"type": "disk"}, "use_shuffle": True, "num_worker_per_gpu": 0, "batch_size_per_gpu": 4,
             "mini_batch_sizes": [4, 2], "iters": [6, 100], "gt_size": 8, "gt_sizes": [8, 6],
             "dataset_enlarge_ratio": 1, "prefetch_mode": None}
    for key, value in train_changes.items():
        if value is None:
            train.pop(key, None)
        else:
            train[key] = value
    return {"name": "Tiny", "model_type": "TinyModel", "scale": 1, "num_gpu": 0, "manual_seed": 7,
            "datasets": {"train": train,
                         "val": {"name": "ValSet", "type": "Dataset_PairedImage",
                                 "dataroot_gt": str(raw / "test" / "high"), "dataroot_lq": str(raw / "test" / "low"),
                                 "io_backend": {"type": "disk"}}},
            "network_g": {"type": "Tiny", "inp_channels": 3, "out_channels": 3},
            "path": {"pretrain_network_g": None, "resume_state": None},
            "train": {"total_iter": 10, "warmup_iter": -1},
            "val": {"val_freq": 5, "save_img": False},
            "logger": {"print_freq": 2, "save_checkpoint_freq": 4, "use_tb_logger": False}}


METRICS = '''
import numpy as np


def calculate_psnr(img, img2, crop_border=0, input_order="HWC", test_y_channel=False, **kwargs):
    a, b = img.astype(np.float64), img2.astype(np.float64)
    if crop_border:
        c = slice(crop_border, -crop_border)
        a, b = a[c, c], b[c, c]
    mse = np.mean((a - b) ** 2)
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0 * 255.0 / mse)
'''


def write_repo(root: Path, opt: dict, style: str = "restormer", yml: str = "Options/Tiny.yml") -> Path:
    """The repository at `root` (made), with `opt` written to `yml`; returns root."""
    files = {"basicsr/__init__.py": "", "basicsr/utils/__init__.py": UTILS, "basicsr/utils/dist_util.py":
             "from basicsr.utils import get_dist_info, init_dist  # noqa: F401\n",
             "basicsr/utils/options.py": OPTIONS, "basicsr/data/__init__.py": DATA,
             "basicsr/data/data_sampler.py": SAMPLER, "basicsr/data/prefetch_dataloader.py": PREFETCH,
             "basicsr/models/__init__.py": MODELS, "basicsr/metrics/__init__.py": METRICS,
             "basicsr/train.py": TRAIN_RESTORMER if style == "restormer" else TRAIN_BASICSR13}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    (root / yml).parent.mkdir(parents=True, exist_ok=True)
    (root / yml).write_text(yaml.safe_dump(opt, sort_keys=False), encoding="utf-8")
    return root
