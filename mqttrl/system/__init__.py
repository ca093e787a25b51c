"""What the machine gives a node: child processes, process groups and stop signals (procs, Linux and
Windows), and its torch device (devices)."""
