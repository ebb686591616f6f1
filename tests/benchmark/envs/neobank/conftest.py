"""The domain of the tests in this folder: ``sandbox_neobank_support_v1``."""

from tests.support.envs import domain_fixture

domain = domain_fixture("sandbox_neobank_support_v1")
