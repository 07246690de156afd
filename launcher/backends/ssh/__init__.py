"""The ssh backend: the agent run on another machine over ssh (host), and the ssh and rsync commands it builds
(commands)."""
