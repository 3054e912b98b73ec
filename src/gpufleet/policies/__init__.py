"""Policy plugins and the registry that turns a policy name into a profile."""
