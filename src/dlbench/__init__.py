"""Framework-neutral helpers shared by the workflow, the run harness and the tests.

Only the standard library and numpy are used here, so every environment can import it.
"""
