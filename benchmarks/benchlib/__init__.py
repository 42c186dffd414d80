"""The benchmark scripts' code that is no part of pairload (the wheel does not ship it): `scale`
(bench_scale.py), `packbench` (bench_pack.py), and the raw benchmark (bench_raw.py): `rawdata` (its SID-style
data and the DNG writer the tests use too), `rawbaselines`, `rawbench`. The scripts put benchmarks/ on sys.path
and import `benchlib.*`; the tests do the same in tests/conftest.py."""
