"""Whole-image inference of odd sizes is exact: pad + crop and tiles give an identity model its input back, a
pixelwise model exactly its function, and a convolutional model whose receptive field fits the tiles' margin the
same output tiled as whole; the whole-image validation loader takes mixed sizes one at a time."""

import pytest
import torch
import torch.nn.functional as F

from pairload.errors import ConfigError, EvaluationError
from pairload.evaluate import Tiling, pad_to_multiple, run_tiled, run_whole, whole_image_loader


class Strict(torch.nn.Module):
    """Refuses inputs that are not multiples of `multiple` (as a U-Net or a windowed transformer would); applies
    `f` to each pixel."""

    def __init__(self, multiple: int, f=lambda x: x):
        super().__init__()
        self.multiple, self.f, self.seen = multiple, f, []

    def forward(self, x):
        assert x.shape[-2] % self.multiple == 0 and x.shape[-1] % self.multiple == 0, tuple(x.shape)
        self.seen.append(tuple(x.shape[-2:]))
        return self.f(x)


def pixelwise(x):
    return torch.sqrt(x) * 0.5 + x * x  # correctly rounded operations: the same bits at any tensor size


@pytest.fixture
def image():
    return torch.rand(2, 3, 97, 131, generator=torch.Generator().manual_seed(0))


def test_pad_and_crop_return_an_identity_models_input_exactly(image):
    model = Strict(8)
    out = run_whole(model, image, multiple=8)
    assert model.seen == [(104, 136)] and torch.equal(out, image)
    padded = pad_to_multiple(image, 8)  # reflection at the bottom and the right, as Retinexformer's test pads
    assert torch.equal(padded, F.pad(image, (0, 5, 0, 7), mode="reflect"))
    small = image[..., :5, :7]  # a pad longer than the side: replicated instead of reflected
    assert torch.equal(run_whole(Strict(16), small, multiple=16), small)
    assert torch.equal(run_whole(Strict(8, pixelwise), image, multiple=8), pixelwise(image))


@pytest.mark.parametrize("tiling", [Tiling(tile=32, overlap=8), Tiling(tile=32, overlap=8, margin=0),
                                    Tiling(tile=64, overlap=16), Tiling(tile=48, overlap=24, margin=12),
                                    Tiling(tile=256, overlap=32)])
def test_tiles_give_identity_and_pixelwise_models_exactly_their_whole_image_output(image, tiling):
    for f in (lambda x: x, pixelwise):
        model = Strict(8, f)
        assert torch.equal(run_tiled(model, image, tiling, multiple=8), f(image))
        assert len(model.seen) == len(tiling.starts(104)) * len(tiling.starts(136))


def test_starts_cover_the_side_and_the_last_tile_is_flush():
    t = Tiling(tile=64, overlap=16)
    assert t.margin == 8 and t.starts(120) == [0, 48, 56] and t.starts(64) == [0] and t.starts(30) == [0]
    for length in (65, 100, 120, 200, 1000):
        starts = t.starts(length)
        kept = [t.kept(s, 64, length) for s in starts]
        assert starts[-1] + 64 == length and kept[0][0] == 0 and kept[-1][1] == length
        assert all(b[0] <= a[1] for a, b in zip(kept, kept[1:]))  # the kept parts meet: no pixel left out


def test_a_convolution_within_the_margin_gives_the_same_output_tiled_as_whole(image):
    torch.manual_seed(0)
    # receptive radius 3 (three 3×3 convolutions), zero padding inside: wrong near any tile edge it is not trimmed
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 3, 3, padding=1)).double().eval()
    x = image[:1, :, :61, :75].double()
    whole = run_whole(net, x, multiple=4)
    tiled = run_tiled(net, x, Tiling(tile=32, overlap=8), multiple=4)  # margin 4 >= radius 3
    assert torch.allclose(tiled, whole, rtol=0, atol=1e-12)
    for short in (Tiling(tile=32, overlap=8, margin=0), Tiling(tile=32, overlap=4)):  # plain average; margin 2 < 3
        assert not torch.allclose(run_tiled(net, x, short, multiple=4), whole, rtol=0, atol=1e-6)


def test_a_model_that_enlarges():
    x = torch.rand(1, 4, 13, 21)
    model = torch.nn.PixelShuffle(2)  # 4 channels at h×w -> 1 at 2h×2w
    expect = model(x)
    assert torch.equal(run_whole(model, x, multiple=4, scale=2), expect)
    assert torch.equal(run_tiled(model, x, Tiling(tile=8, overlap=4), multiple=4, scale=2), expect)
    with pytest.raises(EvaluationError, match=r"the model returned \(1, 1, 32, 48\) for a 16×24 input; expected "
                                              r"N×C×16×24 \(pass scale="):
        run_whole(model, x, multiple=8)


def test_options_that_cannot_work():
    with pytest.raises(ConfigError, match=r"overlap=32 with tile=32; expected an overlap smaller than the tile"):
        Tiling(tile=32, overlap=32)
    with pytest.raises(ConfigError, match=r"margin=5 with overlap=8; expected at most overlap // 2 = 4"):
        Tiling(tile=32, overlap=8, margin=5)
    with pytest.raises(ConfigError, match=r"tile=30 with multiple=8; expected a tile that is a multiple of 8.*"
                                          r"use tile=24"):
        run_tiled(Strict(8), torch.rand(1, 3, 40, 40), Tiling(tile=30, overlap=6), multiple=8)
    with pytest.raises(EvaluationError, match=r"^run_whole: input has shape \(3, 40, 40\); expected N×C×H×W "
                                              r"\(one image: add a batch dimension with image\[None\]\)$"):
        run_whole(Strict(1), torch.rand(3, 40, 40))
    with pytest.raises(ConfigError, match=r"multiple=0: expected a whole number, at least 1"):
        run_whole(Strict(1), torch.rand(1, 3, 40, 40), multiple=0)


def test_the_whole_image_loader_takes_mixed_sizes_one_at_a_time(tmp_path):
    from conftest import make_raw
    from pairload.pack import PackOptions, pack

    sizes = [(40, 48), (36, 60), (40, 48), (33, 41), (40, 48)]
    make_raw(tmp_path / "raw", 5, split="test", sizes=sizes)
    make_raw(tmp_path / "raw", 3, split="same", start=10, size=(24, 32))
    pack(tmp_path / "raw", tmp_path / "shards", PackOptions(workers=1))
    seen = []
    for rank in (0, 1):
        loader = whole_image_loader(tmp_path / "shards", "test", batch_size=4, rank=rank, world_size=2)
        seen += [(b.keys[0], tuple(b.low.shape[-2:])) for b in loader if len(b) == 1]
        loader.close()
    assert sorted(seen) == [(f"{i:05d}", sizes[i]) for i in range(5)]  # each image once, whole
    loader = whole_image_loader(tmp_path / "shards", "same", batch_size=2)
    assert [len(b) for b in loader] == [2, 1]
    loader.close()
