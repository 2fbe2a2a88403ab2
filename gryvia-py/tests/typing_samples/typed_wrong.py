"""Mistakes the typed classes catch (mypy must report each line marked ``# E:``)."""

import gryvia


def mistakes(c: gryvia.Client) -> None:
    job = c.get("GryviaAIJob", "train")
    job.spec.replicas + "1"  # E: Unsupported operand types
    name: int = job.metadata.name  # E: Incompatible types in assignment
    tenants = c.list("GryviaTenant")
    tenants[0].spec.display_name.no_such_method()  # E: has no attribute
    job.spec.replica  # E: has no attribute
