"""The erasure job: its run (``run``, the entry in ``__main__``), the logical phase, the physical
purge, the subject index, the scans and pruning that choose files, the evidence record, the
requests' redaction and the pure SQL builders."""
