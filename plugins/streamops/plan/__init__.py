"""Plan: the Operator Managers request, the Application Manager grants (POLICIES.md §3–§4).
Everything here is pure over plain data, so the simulator and production run the same code."""
