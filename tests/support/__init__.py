"""The one way the tests build things: import from here rather than writing a helper again.

- :mod:`tests.support.envs`: a benchmark domain and an :class:`~benchmark.envs.Environment` over it,
  calling a tool and reading what it answered or stored (``call``, ``failure``, ``error_of``, ``stored``),
  and ``domain_fixture`` for a folder's ``conftest.py``.
- :mod:`tests.support.guardcore`: a small purpose-built schema (two tables, foreign key, check) for the
  guard core's unit tests, which must run without the benchmark data bundle.
- :mod:`tests.support.raw_http`: an HTTP/1.1 upstream made of a bare socket that drops or holds a
  connection at a chosen point, for tests of what a client sends again.
- :mod:`tests.support.services`: whether PostgreSQL, Redis and Chromium are there, and the skip (or, with
  ``SHADOWGUARD_TEST_STRICT=1`` as CI sets it, the failure) when one is missing.

Fixtures that use these live in the ``conftest.py`` of the folder that needs them: ``tests/conftest.py``
(bundle, databases, approval stores), ``tests/benchmark/envs/conftest.py`` (``env``, ``env_patch``) and
one ``conftest.py`` per domain folder (``domain``).
"""
