"""The benchmark: domain environments (benchmark.envs), tasks (benchmark.tasks), replay, conformance,
the lift campaigns (benchmark.campaign) and the ``bench``/``env`` command groups (benchmark.cli). It
may import the guard and the proxy; neither imports it (tests/test_layering.py). Its public names live
in its subpackages' ``__all__``."""

__all__: list[str] = []
