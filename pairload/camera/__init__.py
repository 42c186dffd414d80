"""Camera raw files, for the offline tools: LibRaw's one gateway (`libraw`), the Bayer mosaic packed SID-style and
the developed target (`files`), and the noise profile fitted to dark and flat frames (`calibrate`, `pairload
calibrate`). numpy and rawpy (imported when first used); the loaders over shards never import it."""
