"""Governance view: an Airflow plugin (FastAPI app + "Governance" nav entry) over the governance tables.

* ``plugin.py`` – the :class:`~airflow.plugins_manager.AirflowPlugin` (entry point ``airflow.plugins``);
* ``app.py``    – the FastAPI app: auth through Airflow's auth manager, HTML pages and a JSON API;
* ``reader.py`` – read-only catalog access (governance tables, health, refs, erasure requests), cached
  per table metadata location;
* ``views.py``  – pure shaping of rows into what the pages show (verdicts, deadlines, filters);
* ``charts.py`` – inline SVG charts (no JavaScript, no CDN);
* ``links.py``  – operator extra links to the pages.

Read-only by construction: no route writes, and the erasure requests tables are read with an explicit
column list that never includes ``subject_key``.
"""
