"""The domain of the tests in this folder: ``sandbox_auto_insurance``."""

from tests.support.envs import domain_fixture

domain = domain_fixture("sandbox_auto_insurance")
