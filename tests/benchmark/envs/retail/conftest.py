"""The domain of the tests in this folder: ``sandbox_external_retail``."""

from tests.support.envs import domain_fixture

domain = domain_fixture("sandbox_external_retail")
