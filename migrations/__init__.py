"""The SQL migrations, installed as the package regroup.server.migrations.

This folder holds only NNNN_description.sql files. pyproject.toml maps it to
regroup.server.migrations so that the SQL ships inside the wheel and is read
with importlib.resources wherever regroup is installed; this file makes it a
regular package, which editable installs need in order to import it.
"""
