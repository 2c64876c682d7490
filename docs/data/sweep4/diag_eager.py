# eager_check.py under the name run_one.py queues: python run_one.py diag_eager NAME
import sys

sys.path[:0] = ["/tmp/sweep4"]
import eager_check  # noqa: E402,F401  (runs the check on sys.argv's names)
