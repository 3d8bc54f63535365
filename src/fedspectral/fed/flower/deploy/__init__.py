"""Deployment tooling for Flower's Deployment Engine.

* :mod:`.local` -- a SuperLink and SuperNodes on loopback (optionally with TLS and
  SuperNode authentication), for tests, demos and the documentation's commands;
* :mod:`.certs` -- the test CA, server certificate and SuperNode keys it uses;
* :mod:`.node_runtime` -- a deployed node's ClientApp runtime (``--isolation process``):
  one long-lived process for all the node's messages;
* :mod:`.processes` -- stopping a process tree (the SuperLink's SuperExec, Ray, ...).
"""
