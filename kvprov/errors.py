"""Exit codes and the error type every command raises for a clean, explained exit."""

EXIT_OK = 0
EXIT_CHECKS_FAILED = 1  # a check failed or drift was found
EXIT_USAGE = 2  # bad command line or bad inventory
EXIT_UNREACHABLE = 3  # one or more hosts could not be reached
EXIT_ENVIRONMENT = 4  # the machine kvprov runs on lacks something (root, tools, disk, ports)
EXIT_LAB = 5  # the lab failed to build or boot
EXIT_BUSY = 6  # another deploy or audit --fix holds the inventory's lock
EXIT_INTERNAL = 7  # a bug in kvprov: the traceback is saved, its path printed
EXIT_INTERRUPTED = 130  # Ctrl-C


class KvprovError(Exception):
    """An error with a message meant for the operator and a distinct exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_ENVIRONMENT):
        super().__init__(message)
        self.exit_code = exit_code
