"""The `regroup` command: groups, topics, offsets, connectors and members from a shell.

Install it with `pip install 'regroup-client[cli]'` (docs/cli.md). This package imports
nothing beyond the base client until the command runs, so that `import regroup.client`
never pulls in click or rich, and `regroup` without the extra can say what to install.
"""
