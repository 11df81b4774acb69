"""The audit engine of the WAP audit job: the engine, the file-level reads and the pure SQL builders."""
