"""Named exit codes, for scripts and container health checks."""

OK = 0
FAILED = 1  # the command ran and the answer is "no" (drain timed out, check failed)
USAGE = 2  # argparse's own code for bad arguments
CONFIG = 3  # settings that cannot work, no stack running
REFUSED = 4  # input refused: invalid, sensitive, memory off
UNAVAILABLE = 5  # Redis or the database did not answer
NOT_FOUND = 6  # the thing named does not exist (forget of an unknown source)
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
CLOSED_PIPE = 141  # the reader closed stdout early (128 + SIGPIPE, as shells report it)
