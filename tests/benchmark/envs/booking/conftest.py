"""The domain of the tests in this folder: ``external_booking_v1``."""

from tests.support.envs import domain_fixture

domain = domain_fixture("external_booking_v1")
