"""`pairload pack RAW URL --part I/N` into a real S3-compatible server (moto): the parts, run apart, leave the bytes
of a one-machine pack; the last part (or `--finish`) puts the manifest last; parts of two packs are refused before
anything is put; a pack in parts replaces an older one of the same RAW, its stale shards deleted."""

import subprocess
import sys

import pytest

from pairload import OutputError
from pairload.pack.writer import PackOptions, Part, finish_parts, pack
from pairload.format.binindex import VERIFIED

from conftest import kill_when_written, make_raw

OPTS = PackOptions(workers=1, shard_size=64 * 1024)


@pytest.fixture
def raw(tmp_path):
    """18 training pairs (pixels encode the pair) and 4 test pairs: several shards, so each of 3 parts has some."""
    root = tmp_path / "raw"
    make_raw(root, 18, split="train")
    make_raw(root, 4, split="test", start=100)
    return root


def local_pack(raw, out, options=OPTS) -> dict[str, bytes]:
    pack(raw, out, options)
    return {p.name: p.read_bytes() for p in out.iterdir()  # not the records of its index files found whole
            if not p.name.startswith(".") and not p.name.endswith(VERIFIED)}


def part_to_s3(raw, url, s3, tmp_path, i, n, options=OPTS):
    return pack(raw, url, options, part=Part(i, n), staging=tmp_path / f"staging-{i}-of-{n}-{options.shard_size}",
                storage_options=s3.storage_options)


def s3_flags(s3):
    return ["--storage-option", "key=testing", "--storage-option", "secret=testing",
            "--storage-option", f"endpoint_url={s3.endpoint}"]


def test_three_parts_into_a_bucket_leave_the_one_machine_bytes(raw, tmp_path, s3):
    bucket = s3.bucket()
    url = f"s3://{bucket}/ds"
    expected = local_pack(raw, tmp_path / "local")
    assert sum(name.endswith(".tar") for name in expected) >= 4
    waiting = [part_to_s3(raw, url, s3, tmp_path, i, 3) for i in (2, 0)]
    assert [r.finished for r in waiting] == [False, False] and waiting[1].waiting == [1]
    there = s3.objects(bucket, "ds/")
    assert "manifest.json" not in there  # no manifest while a part is missing
    assert {n for n in there if n.endswith(".tar")} < {n for n in expected if n.endswith(".tar")}
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "pack", str(raw), url, "--part", "1/3",
                          "--shard-size", "64KB", "--workers", "1", "--staging", str(tmp_path / "staging-1"),
                          *s3_flags(s3)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "wrote the manifest" in res.stdout
    assert s3.objects(bucket, "ds/") == expected  # every object byte for byte; records and claims gone


def test_finish_refuses_naming_the_missing_part_then_writes_the_manifest(raw, tmp_path, s3):
    bucket = s3.bucket()
    url = f"s3://{bucket}/ds"
    for i in (0, 1):
        part_to_s3(raw, url, s3, tmp_path, i, 3)
    res = subprocess.run([sys.executable, "-m", "pairload.cli", "pack", str(raw), url, "--finish", *s3_flags(s3)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"error: s3://{bucket}/ds: part 2/3 of 3 has not finished (no .pairload-part-0002-of-0003.record); run "
        f"`pairload pack FOLDER s3://{bucket}/ds --part 2/3` (the same FOLDER and options), then finish again"]
    part_to_s3(raw, url, s3, tmp_path, 2, 3, options=OPTS)
    assert s3.objects(bucket, "ds/") == local_pack(raw, tmp_path / "local")
    with pytest.raises(OutputError, match="no part of a pack made with --part I/N is here"):
        finish_parts(url, storage_options=s3.storage_options, staging=tmp_path / "fin")


def test_parts_of_two_packs_are_refused_before_anything_is_put(raw, tmp_path, s3):
    bucket = s3.bucket()
    url = f"s3://{bucket}/ds"
    part_to_s3(raw, url, s3, tmp_path, 0, 3)
    before = s3.objects(bucket, "ds/")
    other = PackOptions(workers=1, shard_size=96 * 1024)  # other shard boundaries: another pack
    with pytest.raises(OutputError, match=r"\.pairload-part-0000-of-0003\.json: part 0/3 of another pack"):
        part_to_s3(raw, url, s3, tmp_path, 1, 3, options=other)
    with pytest.raises(OutputError, match=r"part 0/3 of a pack in 3 parts, and this is part 1/2"):
        part_to_s3(raw, url, s3, tmp_path, 1, 2)
    assert s3.objects(bucket, "ds/") == before


def test_parts_replace_an_older_pack_of_the_same_raw_and_delete_its_stale_shards(raw, tmp_path, s3):
    bucket = s3.bucket()
    url = f"s3://{bucket}/ds"
    pack(raw, url, OPTS, staging=tmp_path / "old", storage_options=s3.storage_options)  # more, smaller shards
    old = set(s3.objects(bucket, "ds/"))
    bigger = PackOptions(workers=1, shard_size=128 * 1024)
    for i in (1, 0, 2):
        part_to_s3(raw, url, s3, tmp_path, i, 3, options=bigger)
    expected = local_pack(raw, tmp_path / "local", bigger)
    assert old - set(expected)  # the old pack had shards the new one does not
    assert s3.objects(bucket, "ds/") == expected


def test_a_part_killed_mid_pack_runs_again_from_its_own_staging_folder(raw, tmp_path, s3):
    import shutil
    from pairload.pack.bucketparts import default_staging

    bucket = s3.bucket()
    url = f"s3://{bucket}/ds"
    staging = default_staging(f"{url}#.pairload-part-0001-of-0003.record")  # the part's own, as users get it
    args = [sys.executable, "-m", "pairload.cli", "pack", str(raw), url, "--part", "1/3", "--shard-size", "64KB",
            "--workers", "1", *s3_flags(s3)]
    try:
        kill_when_written(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
                          staging, "*.tar.partial")
        assert list(staging.glob("*.tar.partial"))  # a half-written shard the kill left behind
        res = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        for i in (0, 2):
            part_to_s3(raw, url, s3, tmp_path, i, 3)
        assert s3.objects(bucket, "ds/") == local_pack(raw, tmp_path / "local")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def test_no_keep_staging_removes_what_the_part_wrote_and_nothing_else(raw, tmp_path, s3):
    bucket = s3.bucket()
    staging = tmp_path / "mine"
    staging.mkdir()
    (staging / "notes.txt").write_text("a user's file")
    report = pack(raw, f"s3://{bucket}/ds", OPTS, part=Part(0, 3), staging=staging, keep_staging=False,
                  storage_options=s3.storage_options)
    assert not report.upload.kept and [p.name for p in staging.iterdir()] == ["notes.txt"]
    assert any(name.endswith(".tar") for name in s3.objects(bucket, "ds/"))  # uploaded before it was removed
