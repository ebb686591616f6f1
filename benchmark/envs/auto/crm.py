"""Customer CRM tools."""

from __future__ import annotations

from typing import Any

from benchmark.envs.auto.inputs import (
    CrmGetCustomerByEmailInput,
    CrmGetCustomerProfileInput,
    CrmVerifyIdentityInput,
)
from benchmark.envs.auto.rows import Customer
from benchmark.envs.environment import Environment
from benchmark.envs.errors import ToolError
from benchmark.envs.records import TableRef
from benchmark.envs.tools import ToolFn

CUSTOMERS: TableRef[Customer] = TableRef("crm_customers")


def _customer(env: Environment, customer_id: str) -> Customer:
    customer = env.table(CUSTOMERS).get(customer_id)
    if customer is None:
        raise ToolError(f"Customer with ID '{customer_id}' not found")
    return customer


def crm_get_customer_by_email(env: Environment, args: CrmGetCustomerByEmailInput) -> dict[str, Any]:
    """First customer whose email matches case-insensitively; emails are not unique across patches."""
    wanted = args.email.lower()
    for customer in env.table(CUSTOMERS).all():
        if customer.email.lower() == wanted:
            return {
                "customer_id": customer.id,
                "first_name": customer.first_name,
                "last_name": customer.last_name,
            }
    raise ToolError(f"No customer found with email '{args.email}'")


def crm_get_customer_profile(env: Environment, args: CrmGetCustomerProfileInput) -> dict[str, Any]:
    """Profile without the secrets: only whether an SSN is on file, and the question but not its answer."""
    customer = _customer(env, args.customer_id)
    return {
        "customer_id": customer.id,
        "email": customer.email,
        "first_name": customer.first_name,
        "last_name": customer.last_name,
        "date_of_birth": customer.date_of_birth,
        "phone": customer.phone,
        "tier": customer.tier.value,
        "fraud_flag": customer.fraud_flag,
        "security_question": customer.security_question,
        "has_ssn_on_file": customer.ssn_last_4 is not None,
    }


def crm_verify_identity(env: Environment, args: CrmVerifyIdentityInput) -> dict[str, Any]:
    """SSN wins when both are given (exact match); the security answer matches case-insensitively."""
    if not args.ssn_last_4 and not args.security_answer:
        raise ToolError("Must provide either ssn_last_4 or security_answer for verification")
    customer = _customer(env, args.customer_id)
    if args.ssn_last_4:
        return {"verified": customer.ssn_last_4 == args.ssn_last_4, "verification_method": "ssn"}
    stored, answer = customer.security_answer, args.security_answer
    verified = stored is not None and answer is not None and stored.lower() == answer.lower()
    return {"verified": verified, "verification_method": "security_question"}


TOOLS: dict[str, ToolFn] = {
    "crm_get_customer_by_email": crm_get_customer_by_email,
    "crm_get_customer_profile": crm_get_customer_profile,
    "crm_verify_identity": crm_verify_identity,
}

READ_ONLY: frozenset[str] = frozenset(TOOLS)
