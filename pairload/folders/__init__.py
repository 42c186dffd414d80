"""Reading raw dataset folders: find low/high pairs as the public datasets ship them (`discover.find_pairs`, built
from the modules beside it), or the photos of a targets-only pack (`photos.find_targets`), and read their images
(`decode`: header probes and exact RGB decodes). numpy, OpenCV and Pillow only; never imports torch or DALI."""

from .decode import decode_rgb, probe_size  # noqa: F401
from .discover import IMAGE_EXTS, Discovery, Pair, find_pairs  # noqa: F401
