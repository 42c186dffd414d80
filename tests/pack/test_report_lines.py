"""What `pairload pack` prints, from the report alone: `PackReport.lines` and `finish_lines`, `UploadReport.summary`."""

from pathlib import Path

from pairload.pack.options import PackOptions, PackReport, UploadReport

SPLITS = {"train": {"samples": 10, "shards": 2, "bytes": 2048, "pixel_bytes": 4096},
          "test": {"samples": 3, "shards": 1, "bytes": 512, "pixel_bytes": 512}}


def test_each_split_then_the_run_then_what_was_converted():
    report = PackReport(shards_dir=Path("out"), splits=SPLITS, seconds=2.0, workers=3, compression="zstd",
                        layout={"train": {"folders": ["a", "b", "c", "d", "e"], "rules": ["same name"]}},
                        skipped_per_split={"train": 2}, gray=[f"g{i}.png" for i in range(12)])
    lines = report.lines(PackOptions(compress_level=7))  # the report's compression, the options' level
    assert lines[:2] == ["train: 10 pairs in 2 shards, 2.0 KB (zstd level 7: 2.00x smaller than its pixels) (from a, "
                         "b, c, d …; paired by same name); 2 unmatched file(s) skipped",
                         "test: 3 pairs in 1 shards, 512 B (zstd level 7: 1.00x smaller than its pixels)"]
    assert lines[2].startswith("packed 13 pairs in 2.0 s (6 pairs/s, 3 workers) into out; ")
    assert lines[3] == ("grayscale replicated to RGB: 12 file(s): " + ", ".join(f"g{i}.png" for i in range(10))
                        + " … and 2 more")
    assert len(lines) == 4


def test_a_part_that_waits_for_others_prints_its_state_alone():
    report = PackReport(shards_dir=Path("out"), splits=SPLITS, seconds=1.25, part="1/3", waiting=[0, 2])
    assert report.lines(PackOptions(targets_only=True)) == [
        "part 1/3: done in 1.2 s, 13 targets; waiting for part(s) 0, 2 before the manifest"]


def test_a_reused_upload_says_nothing_was_decoded_and_what_the_bucket_already_had():
    upload = UploadReport(url="s3://b/p", staging=Path("stage"), kept=False, reused=True, uploaded=["a.tar"],
                          skipped=["manifest.json", "c.tar"], bytes_uploaded=0)
    report = PackReport(shards_dir=Path("stage"), splits=SPLITS, url="s3://b/p", upload=upload)
    assert report.lines(PackOptions())[2:] == [
        "13 pairs already packed in the staging folder stage (nothing decoded)",
        "uploaded 1 shards (0 B) to s3://b/p; manifest.json there is already this pack's; skipped 1 shards already "
        "there; staging folder stage removed"]


def test_finish_names_the_manifest_it_wrote():
    assert PackReport(shards_dir=Path("stage"), splits=SPLITS, url="s3://b/p").finish_lines() == [
        "finished: 13 pairs in 3 shards; wrote s3://b/p/manifest.json"]
    assert PackReport(shards_dir=Path("out"), splits=SPLITS).finish_lines() == [
        "finished: 13 pairs in 3 shards; wrote out/manifest.json"]


def test_an_encoded_pack_says_what_it_kept_tiled_and_stored_as_pixels_and_why():
    report = PackReport(shards_dir=Path("out"), splits=SPLITS, compression="encoded", kept=4980,
                        tiled={"PNG": [f"p{i}.png" for i in range(300)], "camera raw": ["a.dng"]},
                        decoded={"incompressible": ["noise.png"]})
    lines = report.lines(PackOptions(store="encoded"))
    assert lines[0].startswith("train: 10 pairs in 2 shards, 2.0 KB (encoded: 2.00x smaller than its pixels)")
    assert lines[2] == ("kept 4,980 JPEG files as they are; stored 301 images lossless as tiles: 300 PNG (p0.png, "
                        "p1.png, p2.png …), 1 camera raw (a.dng); stored 1 image as pixels: 1 incompressible "
                        "(noise.png)")
    assert PackReport(shards_dir=Path("out"), kept=1).stored_line() == "kept 1 JPEG file as it is"
    assert "JPEG" not in " ".join(PackReport(shards_dir=Path("out"), splits=SPLITS).lines(PackOptions()))
