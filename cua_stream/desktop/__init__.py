"""The local desktop: Harbor environments for computer-1 episodes without Docker, each in its own
mount, PID and network namespace on the host."""
