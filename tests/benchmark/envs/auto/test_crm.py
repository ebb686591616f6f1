"""Auto-insurance CRM tools on a real Environment (SQLite in memory), over the domain defaults.

CUS-00012345 (Robert Chen) has an SSN and a security answer ("Fluffy"); CUS-00056789 has neither a
phone nor a security question/answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmark.envs import Domain, Environment
from benchmark.envs.auto import crm
from tests.support.envs import call, failed, stored

CUSTOMERS = crm.CUSTOMERS


def test_all_crm_tools_are_read_only(domain: Domain) -> None:
    assert set(crm.TOOLS) == crm.READ_ONLY
    assert not any(domain.tools[name].writes for name in crm.TOOLS)


def test_get_customer_by_email_is_case_insensitive_and_takes_first_match(env: Environment) -> None:
    original = stored(env, CUSTOMERS, "CUS-00023456")
    env.apply_patch({CUSTOMERS: [{**original, "id": "CUS-LATER", "first_name": "Other"}]})
    text = env.call_tool("crm_get_customer_by_email", {"email": "Sarah.Miller@OUTLOOK.com"})
    assert text == '{"customer_id": "CUS-00023456", "first_name": "Sarah", "last_name": "Miller"}'


def test_get_customer_by_email_unknown(env: Environment) -> None:
    assert (
        failed(env, "crm_get_customer_by_email", {"email": "nobody@example.com"})
        == "No customer found with email 'nobody@example.com'"
    )


def test_get_customer_profile_hides_secrets(env: Environment) -> None:
    text = env.call_tool("crm_get_customer_profile", {"customer_id": "CUS-00012345"})
    assert text == (
        '{"customer_id": "CUS-00012345", "email": "robert.chen@outlook.com", "first_name": "Robert", '
        '"last_name": "Chen", "date_of_birth": "1985-03-15", "phone": "310-555-0101", "tier": "Standard", '
        '"fraud_flag": false, "security_question": "What is your pet\'s name?", "has_ssn_on_file": true}'
    )


def test_get_customer_profile_drops_missing_optional_fields(env: Environment) -> None:
    out = call(env, "crm_get_customer_profile", {"customer_id": "CUS-00056789"})
    assert "phone" not in out and "security_question" not in out
    assert out["tier"] == "Preferred" and out["has_ssn_on_file"] is True


def test_get_customer_profile_unknown(env: Environment) -> None:
    assert (
        failed(env, "crm_get_customer_profile", {"customer_id": "CUS-NOPE"})
        == "Customer with ID 'CUS-NOPE' not found"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"ssn_last_4": "1234"}, {"verified": True, "verification_method": "ssn"}),
        ({"ssn_last_4": "0000"}, {"verified": False, "verification_method": "ssn"}),
        (
            {"ssn_last_4": "0000", "security_answer": "Fluffy"},
            {"verified": False, "verification_method": "ssn"},
        ),
        (
            {"ssn_last_4": "", "security_answer": "fLUFFY"},
            {"verified": True, "verification_method": "security_question"},
        ),
        ({"security_answer": "Rex"}, {"verified": False, "verification_method": "security_question"}),
    ],
)
def test_verify_identity_prefers_ssn_then_answer(
    env: Environment, args: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert call(env, "crm_verify_identity", {"customer_id": "CUS-00012345", **args}) == expected


def test_verify_identity_without_stored_answer_fails_verification(env: Environment) -> None:
    out = call(env, "crm_verify_identity", {"customer_id": "CUS-00056789", "security_answer": "anything"})
    assert out == {"verified": False, "verification_method": "security_question"}


def test_verify_identity_needs_a_credential_before_the_lookup(env: Environment) -> None:
    assert (
        failed(env, "crm_verify_identity", {"customer_id": "CUS-NOPE", "ssn_last_4": None})
        == "Must provide either ssn_last_4 or security_answer for verification"
    )


def test_verify_identity_unknown_customer(env: Environment) -> None:
    assert (
        failed(env, "crm_verify_identity", {"customer_id": "CUS-NOPE", "ssn_last_4": "1234"})
        == "Customer with ID 'CUS-NOPE' not found"
    )
