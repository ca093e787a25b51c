"""The long-running roles. Each meets the others only on the broker; none imports another's internals."""
