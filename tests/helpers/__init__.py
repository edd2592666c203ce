"""Test-only helpers importable from every test directory (pytest ``pythonpath = tests``)."""
