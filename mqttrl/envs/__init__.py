"""Environments: building one from an id (gymnasium, ``module:Env``, plugins) and stepping a set of them."""
