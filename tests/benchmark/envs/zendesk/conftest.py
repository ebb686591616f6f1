"""The domain of the zendesk tests: retail, unless a variant's module names its own
(``domain = domain_fixture(...)``)."""

from tests.support.envs import domain_fixture

domain = domain_fixture("sandbox_external_retail")
