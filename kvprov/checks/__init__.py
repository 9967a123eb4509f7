"""kvprov's host checks for pytest-testinfra, run from users' own CI:

    pytest --hosts='ansible://gpu_nodes' --ansible-inventory=inventory.yml --pyargs kvprov.checks

The expectations come from the same inventory and roles as `kvprov deploy` (kvprov.desired);
there is no second list of expected values. See kvprov/checks/plugin.py for the options.
"""
