"""Orchestration around DVC: generated DVC files, import closures, lock repair, the remote, the campaign
executor and the regression gate."""
