"""Governance view in a real browser, over what ``make demo`` leaves: Debian's Chromium (headless, via
chromedriver and selenium) against the Airflow UI that ``make ui`` starts (``scripts/ui.sh``: API server,
scheduler, DAG processor and triggerer on 127.0.0.1) with three logins of a real auth manager
(``tests.support.dag_limited_auth``: the SimpleAuthManager plus per-DAG limits): ``admin``; ``auditor``,
who may read every DAG but lacks the erasure permission; ``limited``, who may read only
``iceberg_multi_publish``.

The lake and the Airflow home are built by the demo itself: ``scripts/demo.py`` (what ``make demo``
runs) over :data:`DEMO_DAGS`, the example DAGs whose runs the view's promises are about, with their
``DEMO`` runs (the waiting steward gate, the refused erasure), the request it erases late and the task logs
the demo writes. One demo and one ``scripts/ui.sh`` per module. The test logs in through Airflow's
login form like a person, opens the pages, checks what a person looks for after the demo (dates, not
bars; calibrated verdicts in words; a multi-table publish on each table; both runs of an erasure; the
deadlines a late erasure missed; tables holding evidence without declared subject columns; task context in every
extra link; a refusal's reason; the approval form waiting; no key the demo submitted left in any file of
a requests table), and saves screenshots under
``.work/screenshots/`` (ignored by git; ``make docs-images`` writes them to ``docs/images/`` instead).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from scripts import demo
from tests.support.key_scan import files_holding, scanned_files
from tests.support.lake import ROOT, pristine_airflow_db
from tests.support.servers import _wait, free_port_range, free_ports, skip_or_fail
from tests.support.ui import ROLES, auth_env

pytestmark = [pytest.mark.airflow, pytest.mark.spark]  # the demo runs Spark jobs (one Spark Connect server)

#: Where screenshots go: an ignored folder, unless ``make docs-images`` points ``AIP_SCREENSHOTS`` at docs/images.
IMAGES = Path(os.environ.get("AIP_SCREENSHOTS") or ROOT / ".work" / "screenshots")
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)
#: The example DAGs the demo runs for this module (``scripts/demo.py`` with these ids): the multi-table
#: publish with its waiting steward gate, the erasure with its refused run and its late run, and
#: the daily logical erasure followed by the nightly purge of the same requests.
DEMO_DAGS = ("iceberg_multi_publish", "iceberg_erasure", "iceberg_erasure_daily", "iceberg_erasure_nightly")
#: Names the test process may carry that would point the demo or ``make ui`` elsewhere than the module's layout.
_FOREIGN = ("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", "AIRFLOW__API__BASE_URL", "AIRFLOW__API_AUTH__JWT_SECRET")


def _stop_group(proc: subprocess.Popen, grace: float = 40.0) -> None:
    """Ctrl-C for ``make ui``: SIGINT to its process group (make, the script and its Airflow processes)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def run_demo(work: Path, home: Path, env: dict[str, str], log: Path) -> str:
    """``make demo``'s runs of :data:`DEMO_DAGS` into ``work`` (lake) and ``home`` (Airflow): the demo's own
    driver with the environment ``scripts/demo.sh`` gives it; returns its output."""
    (connect_port,) = free_ports(1)
    demo_env = {
        **env,
        "AIP_WORK": str(work),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "example_dags"),
        "AIP_DEMO_CONNECT_PORT": str(connect_port),
    }
    proc = subprocess.run(
        ["bash", "-c", 'source scripts/env.sh && exec python scripts/demo.py "$@"', "demo", *DEMO_DAGS],
        env=demo_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    out = proc.stdout + proc.stderr
    log.write_text(out)
    assert proc.returncode == 0 and "demo: all runs as expected" in out, out[-4000:]
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_bin):
        skip_or_fail("chromium / chromium-driver are not installed (scripts/bootstrap.sh installs them)")
    tmp = tmp_path_factory.mktemp("ui_browser")
    work = tmp / "work"
    home = work / "airflow"
    home.mkdir(parents=True)
    shutil.copy(pristine_airflow_db(), home / "airflow.db")
    base_env = {k: v for k, v in os.environ.items() if k not in _FOREIGN}
    demo_out = run_demo(work, home, base_env, tmp / "demo.log")
    env = {**base_env, **auth_env()}
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = ",".join(
        f"{u}:{ROLES[u]}" for u in ("admin", "auditor", "limited")
    )
    from tests.support.dag_limited_auth import LIMITS_ENV

    env[LIMITS_ENV] = "limited=iceberg_multi_publish"
    port = free_port_range(3)
    env.update(
        AIP_WORK=str(work),
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "example_dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIP_UI_PORT=str(port),
    )
    log = tmp / "make-ui.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["make", "-s", "ui"], env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    driver = None
    try:
        _wait(lambda: "login admin" in log.read_text(), timeout=900, what="make ui", proc=proc, log=log)
        printed = log.read_text()
        logins = dict(re.findall(r"login (\w+)\s+/ (\S+)", printed))
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for flag in (*CHROME_FLAGS, f"--user-data-dir={tmp / 'chrome-profile'}"):
            opts.add_argument(flag)
        driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
        driver.set_page_load_timeout(90)
        IMAGES.mkdir(parents=True, exist_ok=True)
        yield SimpleNamespace(
            base=base, driver=driver, env=env, log=log, printed=printed, logins=logins, work=work, demo=demo_out
        )
    finally:
        if driver is not None:
            driver.quit()
        _stop_group(proc)


def _text(driver) -> str:
    return driver.find_element("tag name", "body").text


def _wait_for(driver, predicate, what: str, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(0.25)
    raise AssertionError(f"{what} not seen within {timeout:.0f}s; page text:\n{_text(driver)[:2000]}")


def _shot(driver, name: str) -> None:
    height = driver.execute_script("return Math.min(document.body.scrollHeight, 4000)")
    driver.set_window_size(1400, max(int(height or 0) + 40, 800))
    driver.save_screenshot(str(IMAGES / name))
    driver.set_window_size(1400, 1000)


def _login(server, user: str) -> None:
    d = server.driver
    d.delete_all_cookies()
    d.get(f"{server.base}/")
    _wait_for(d, lambda: len(d.find_elements("css selector", "input[type=password]")) == 1, "the login form")
    d.find_element("css selector", "input:not([type=password])").send_keys(user)
    d.find_element("css selector", "input[type=password]").send_keys(server.logins[user])
    d.find_element("css selector", "button[type=submit]").click()
    _wait_for(d, lambda: d.get_cookie("_token") is not None, "the session cookie after login")


@pytest.fixture(scope="module")
def browser(server):
    """The browser after logging in as ``admin`` through Airflow's own login form."""
    _login(server, "admin")
    return server


def _framed(d) -> None:
    """Switch into the Governance frame of the Airflow UI."""
    _wait_for(d, lambda: d.find_elements("css selector", "iframe"), "the Governance plugin frame")
    d.switch_to.frame(d.find_element("css selector", "iframe"))


def _api(browser, path: str):
    req = urllib.request.Request(
        f"{browser.base}/api/v2/{path}", headers={"Cookie": f"_token={browser.driver.get_cookie('_token')['value']}"}
    )
    return json.load(urllib.request.urlopen(req))


def _governance_json(browser, path: str):
    req = urllib.request.Request(
        f"{browser.base}/governance/api/{path}",
        headers={"Cookie": f"_token={browser.driver.get_cookie('_token')['value']}"},
    )
    return json.load(urllib.request.urlopen(req))


def _run_id(browser, dag_id: str, state: str | None = None) -> str:
    """The newest run of ``dag_id`` the demo made (in ``state`` when given)."""
    runs = _api(browser, f"dags/{dag_id}/dagRuns?order_by=-run_after&limit=20")["dag_runs"]
    found = [r["dag_run_id"] for r in runs if state is None or r["state"] == state]
    assert found, f"no {state or ''} run of {dag_id}: {runs}"
    return found[0]


def _links(browser, dag_id: str, run_id: str, task_id: str) -> dict[str, str]:
    """The extra links Airflow stored for a demo task (computed on the worker when the task ended)."""
    got = _api(browser, f"dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/links")
    # without [api] base_url the links are paths of this Airflow UI
    return {name: browser.base + url if url.startswith("/") else url for name, url in got["extra_links"].items() if url}


def test_make_ui_prints_url_and_logins_over_the_demo_catalog(browser):
    text = browser.printed
    assert f"Airflow UI (the demo's runs, notes, task logs, extra links): {browser.base}" in text
    assert set(browser.logins) == {"admin", "auditor", "limited"}
    assert all(len(p) >= 12 for p in browser.logins.values())
    assert f"catalog {browser.work}/lake" in text
    d = browser.driver
    d.get(f"{browser.base}/governance/")
    assert "erasure_daily.orders" in _text(d) and "cannot be read" not in _text(d)  # the demo's catalog


def test_home_page_components_are_healthy(browser):
    """The scheduler, DAG processor and triggerer that `make ui` starts report healthy."""
    req = urllib.request.Request(f"{browser.base}/api/v2/monitor/health")
    deadline = time.monotonic() + 120
    while True:
        health = json.load(urllib.request.urlopen(req, timeout=10))
        states = {k: (v or {}).get("status") for k, v in health.items()}
        if all(s == "healthy" for s in states.values()) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert states == dict.fromkeys(states, "healthy") and {"scheduler", "triggerer", "dag_processor"} <= set(states)
    d = browser.driver
    d.get(f"{browser.base}/")
    _wait_for(d, lambda: "Scheduler" in _text(d), "the home page health")
    time.sleep(2)
    _shot(d, "airflow-home.png")


def test_governance_entry_inside_the_airflow_ui(browser):
    d = browser.driver
    d.get(f"{browser.base}/plugin/iceberg-governance")
    _wait_for(d, lambda: "Governance" in _text(d), "the Governance nav entry")
    _framed(d)
    _wait_for(d, lambda: "gates.orders_eu" in _text(d), "the tables page inside the frame")
    d.switch_to.default_content()
    _shot(d, "governance-in-airflow.png")


#: A health reason that prints an option key (``min_avg_file_size_bytes``) instead of words.
_RAW_KEY = re.compile(r"\b[a-z]+(?:_[a-z]+){2,}\b")


def test_health_verdicts_after_the_demo_are_green_or_amber_with_reasons_in_words(browser):
    """Right after the demo (maintenance and purges included) no table is red: red means an incident.
    Reasons and notes read as words, not option keys."""
    d = browser.driver
    d.get(f"{browser.base}/governance/")
    verdicts = {
        row.get_attribute("data-table"): row.find_element("css selector", "td.verdict")
        for row in d.find_elements("css selector", "#tables tr[data-table]")
    }
    assert {"erasure_daily.orders", "erasure.orders", "gates.orders_eu", "gates.orders_us"} <= set(verdicts)
    for table, cell in verdicts.items():
        assert cell.get_attribute("data-verdict") in ("healthy", "needs maintenance"), (table, cell.text)
        badge = cell.find_element("css selector", ".badge")
        assert badge.text == cell.get_attribute("data-verdict")
        assert badge.value_of_css_property("background-color") != "rgba(0, 0, 0, 0)"  # coloured
        for reason in cell.find_elements("css selector", ".reason"):
            assert not _RAW_KEY.search(reason.text), (table, reason.text)
    _shot(d, "governance-tables.png")


def test_a_multi_table_publish_shows_on_each_table_it_touched(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/")
    for table in ("gates.orders_eu", "gates.orders_us"):
        row = d.find_element("css selector", f"#tables tr[data-table='{table}']")
        assert "never" not in row.text.lower(), row.text  # last publish
    for table, other in (("gates.orders_eu", "gates.orders_us"), ("gates.orders_us", "gates.orders_eu")):
        d.get(f"{browser.base}/governance/tables/{table}")
        published = d.find_elements("css selector", "tr[data-publish]")
        assert published, _text(d)[:1500]
        assert other in published[0].find_element("css selector", ".together").text
        assert "iceberg_multi_publish › publish_together" in published[0].text


def test_the_approval_left_waiting_shows_with_its_form(browser):
    """The demo leaves the multi-table publish's steward gate waiting: the Approvals page lists it, and its
    link opens Airflow's form with the gate's question and options."""
    d = browser.driver
    d.get(f"{browser.base}/governance/approvals")
    row = d.find_element("css selector", "#waiting tr[data-task='iceberg_multi_publish.steward']")
    assert "gates.orders_us" in row.text and "Publish · Drop branch · Keep for later" in row.text
    assert "despite warn-level audit findings" in row.text
    _shot(d, "governance-approvals.png")
    form = row.find_element("css selector", "a.hitl-form")
    assert form.get_attribute("target") == "_top"
    assert form.get_attribute("href").endswith("/tasks/steward/required_actions")
    d.get(form.get_attribute("href"))
    _wait_for(d, lambda: "Keep for later" in _text(d), "the steward's form", timeout=90)
    text = _text(d)
    assert "gates.orders_us" in text and "Drop branch" in text and "table.enough_rows" in text
    _shot(d, "airflow-approval-form.png")
    run_id = _run_id(browser, "iceberg_multi_publish", "running")
    note = _api(browser, f"dags/iceberg_multi_publish/dagRuns/{quote(run_id, safe='')}")["note"]
    assert note.startswith("Left waiting on purpose (demo)")


def _request_ids(browser) -> dict[str, dict]:
    return {r["request_id"]: r for r in _governance_json(browser, "erasure")["requests"]}


def test_evidence_report_names_the_logical_run_and_the_purge_run(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/erasure")
    _shot(d, "governance-erasure.png")
    row = d.find_element("css selector", "tr[data-request='DSR-D-0001']")
    assert row.find_element("css selector", "td.erased-at").text.endswith("UTC")
    row.find_element("css selector", "a[href*='/report']").click()
    _wait_for(d, lambda: "Erasure evidence report" in _text(d), "the evidence report")
    logical = d.find_element("css selector", "td.phase-runs[data-role='logical']").text
    purge = d.find_element("css selector", "td.phase-runs[data-role='purge']").text
    assert "iceberg_erasure_daily › erase_logically" in logical
    assert "iceberg_erasure_nightly › nightly_maintenance" in purge
    assert len(d.find_elements("css selector", ".deadline")) == 2
    _shot(d, "governance-evidence-report.png")
    assert len(d.print_page()) > 1000  # what "Print / save as PDF" produces
    for subject in demo.demo_subject_keys():  # every key the demo submitted: never on a page
        assert subject not in d.page_source


def test_the_late_request_shows_its_missed_deadlines_in_red(browser):
    """The demo erases one request 35 days after receipt: redacted like the others, and red for good on the
    Erasure page and its report (both deadlines missed, with their dates); its run carries the demo's note."""
    d = browser.driver
    d.get(f"{browser.base}/governance/erasure")
    row = d.find_element("css selector", f"tr[data-request='{demo.OVERDUE_REQUEST_ID}']")
    assert "erased late" in row.text and "redacted" in row.text and "fail" in row.get_attribute("class")
    assert len(re.findall(r"\bdue \d{4}-\d{2}-\d{2}", row.text)) == 2  # both deadlines, with their dates
    late = row.find_elements("css selector", "td[data-state='late']")
    assert len(late) == 2 and all("late" in e.text and "fail" in e.get_attribute("class") for e in late)
    d.get(f"{browser.base}/governance/erasure/{demo.OVERDUE_REQUEST_ID}/report")
    missed = d.find_elements("css selector", ".deadline[data-state='late']")
    assert len(missed) == 2 and all("due" in e.text and "fail" in e.get_attribute("class") for e in missed)
    assert demo.OVERDUE_SUBJECT not in d.page_source
    run_id = _run_id(browser, demo.OVERDUE_DAG, "success")
    note = _api(browser, f"dags/{demo.OVERDUE_DAG}/dagRuns/{quote(run_id, safe='')}")["note"]
    assert note == demo.OVERDUE_NOTE


def test_the_erasure_map_flags_tables_with_evidence_but_no_subject_columns(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/erasure-map")
    evidence_tables = {
        t["table"] for r in _request_ids(browser).values() for t in r.get("tables", ()) if t.get("table")
    }
    declared = {e.get_attribute("data-table") for e in d.find_elements("css selector", "tr[data-table]")}
    flagged = {
        e.get_attribute("data-undeclared"): e.text for e in d.find_elements("css selector", "li[data-undeclared]")
    }
    assert evidence_tables, "the demo's erasures left evidence"
    for table in evidence_tables - declared:
        assert "declares no subject columns" in flagged[table], (table, flagged)
    for table in flagged:
        assert table in evidence_tables and table not in declared
    _shot(d, "governance-erasure-map.png")


def _context(url: str) -> dict[str, str]:
    query = parse_qs(urlsplit(url).query)
    return {k: v[0] for k, v in query.items() if k in ("dag_id", "run_id", "task_id")}


def test_every_extra_link_of_the_demo_carries_its_tasks_context(browser):
    """The audit, erasure and maintenance tasks of the demo: each stored link names its own task instance,
    and the nightly purge's link shows its moments as dates (never as bars)."""
    tasks = [
        ("iceberg_multi_publish", _run_id(browser, "iceberg_multi_publish", "success"), "audit_eu"),
        ("iceberg_erasure", _run_id(browser, "iceberg_erasure", "success"), "erase_orders"),
        ("iceberg_erasure_daily", _run_id(browser, "iceberg_erasure_daily"), "erase_logically"),
        ("iceberg_erasure_nightly", _run_id(browser, "iceberg_erasure_nightly"), "nightly_maintenance"),
    ]
    urls = {}
    for dag_id, run_id, task_id in tasks:
        links = _links(browser, dag_id, run_id, task_id)
        assert links, (dag_id, task_id)
        for name, url in links.items():
            assert _context(url) == {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}, (name, url)
        urls[task_id] = next(iter(links.values()))
    d = browser.driver
    d.get(urls["nightly_maintenance"])
    _framed(d)
    _wait_for(d, lambda: d.find_elements("id", "maintenance-task"), "the nightly run's maintenance")
    assert "iceberg_erasure_nightly" in d.find_element("id", "maintenance-task").text
    chart = d.find_element("css selector", "svg[aria-label='what each maintenance action did']")
    moments = [m.text for m in chart.find_elements("css selector", "text.moment")]
    assert moments and all(re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", m) for m in moments), moments
    assert not any(m.startswith("1970") for m in moments), moments  # a length of time is not a date
    durations = [t.text for t in chart.find_elements("css selector", "text.duration")]
    assert durations and all(re.fullmatch(r"\d+ (d \d+ h|h \d+ min)", t) for t in durations), durations
    # no epoch-millisecond figure drawn as a bar or an axis value: every number outside a date is small
    figures = " ".join(
        t.text for t in chart.find_elements("css selector", "text") if t.get_attribute("class") != "moment"
    )
    numbers = [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", figures)]
    assert all(n < 1e11 for n in numbers), figures
    d.switch_to.default_content()
    _shot(d, "governance-maintenance-link.png")


def test_a_refused_erasure_shows_its_reason(browser):
    """The demo's second erasure run names a missing column: its task's link shows the refusal and why."""
    run_id = _run_id(browser, "iceberg_erasure", "failed")
    links = _links(browser, "iceberg_erasure", run_id, "erase_profiles")
    (url,) = links.values()
    d = browser.driver
    d.get(url)
    _framed(d)
    _wait_for(d, lambda: d.find_elements("css selector", ".refusal"), "the refusal")
    refusal = d.find_element("css selector", ".refusal").text
    assert "email" in refusal and "do not exist in erasure.profiles" in refusal
    assert refusal.count("nothing was changed") == 1
    d.switch_to.default_content()
    _shot(d, "governance-refused-erasure.png")


def test_task_log_of_a_demo_run_is_visible(browser):
    d = browser.driver
    run_id = _run_id(browser, "iceberg_multi_publish", "success")
    d.get(f"{browser.base}/dags/iceberg_multi_publish/runs/{quote(run_id, safe='')}/tasks/audit_eu")
    _wait_for(d, lambda: "audit" in _text(d).lower() and "snapshot" in _text(d).lower(), "the task's log", timeout=90)
    assert "Could not read served logs" not in _text(d)
    _shot(d, "airflow-task-log.png")


def _expand_json(d) -> None:
    """Expand the collapsed JSON value like a person does (the "expand all" button, else the value)."""
    for button in d.find_elements("css selector", "button[aria-label], button[title]"):
        label = (button.get_attribute("aria-label") or button.get_attribute("title") or "").lower()
        if "expand" in label:
            button.click()
            return
    for el in d.find_elements("xpath", "//*[contains(text(), '…')]"):
        if el.is_displayed():
            el.click()
            return


def test_xcom_view_shows_the_exact_snapshot_id(browser):
    d = browser.driver
    run_id = _run_id(browser, "iceberg_multi_publish", "success")
    path = (
        f"dags/iceberg_multi_publish/dagRuns/{quote(run_id, safe='')}/taskInstances/audit_eu/xcomEntries/return_value"
    )
    stored = _api(browser, path)["value"]
    exact = stored.get("snapshot_id")
    assert isinstance(exact, str) and exact.isdigit(), "snapshot ids in XCom must be decimal strings"
    d.get(f"{browser.base}/dags/iceberg_multi_publish/runs/{quote(run_id, safe='')}/tasks/audit_eu/xcom")
    _wait_for(d, lambda: "return_value" in _text(d), "the XCom view", timeout=60)
    _expand_json(d)
    _wait_for(d, lambda: exact in _text(d), "the exact snapshot id in the XCom view", timeout=20)
    _shot(d, "xcom-snapshot-id.png")


def test_user_without_the_erasure_permission_sees_no_erasure_data(server, browser):
    """admin (above) sees erasure; auditor (every DAG, no erasure permission) gets 403 and no erasure
    data in pages or JSON."""
    _login(server, "auditor")
    d = server.driver
    try:
        for path in ("/governance/erasure", "/governance/erasure/DSR-D-0001/report", "/governance/approvals"):
            d.get(f"{server.base}{path}")
            assert "Not allowed" in _text(d), path
            assert "DSR-" not in d.page_source and "steward" not in d.page_source, path
        token = d.get_cookie("_token")["value"]
        for path in ("/governance/api/erasure", "/governance/api/erasure/DSR-D-0001", "/governance/api/approvals"):
            req = urllib.request.Request(f"{server.base}{path}", headers={"Cookie": f"_token={token}"})
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req)
            assert err.value.code == 403 and b"DSR-" not in err.value.read()
        d.get(f"{server.base}/governance/tables/erasure_daily.orders")
        assert "Snapshot timeline" in _text(d)  # the table stays readable
        req = urllib.request.Request(
            f"{server.base}/governance/api/tables/erasure_daily.orders", headers={"Cookie": f"_token={token}"}
        )
        body = urllib.request.urlopen(req).read().decode()
        for data in ("DSR-D-0001", "DSR-D-0002", "erase_logically"):
            assert data not in body and data not in d.page_source, data
        _shot(d, "governance-viewer-table.png")
    finally:
        _login(server, "admin")


def test_user_limited_to_some_dags_sees_only_their_rows(server, browser):
    """limited may read iceberg_multi_publish only: its audits and publish show on the gates tables, the
    erasure DAGs' rows do not (the admin, above, sees all of them)."""
    d = server.driver
    d.get(f"{server.base}/governance/tables/erasure_daily.orders")
    assert "iceberg_erasure_nightly" in _text(d)  # control: the admin sees the nightly run
    _login(server, "limited")
    try:
        d.get(f"{server.base}/governance/tables/gates.orders_us")
        text = _text(d)
        assert "enough_rows" in text and "iceberg_multi_publish" in text
        d.get(f"{server.base}/governance/tables/erasure_daily.orders")
        assert "iceberg_erasure_nightly" not in d.page_source and "iceberg_erasure_daily" not in d.page_source
        assert not d.find_elements("css selector", "a[href*='/erasure']")
        _shot(d, "governance-limited-table.png")
    finally:
        _login(server, "admin")


def test_logged_out_visit_goes_to_the_login_and_back(server, browser):
    d = server.driver
    d.delete_all_cookies()
    target = f"{server.base}/governance/erasure/DSR-D-0001/report"
    d.get(target)
    _wait_for(d, lambda: len(d.find_elements("css selector", "input[type=password]")) == 1, "the login page")
    assert '"detail"' not in d.page_source  # not raw JSON
    d.find_element("css selector", "input:not([type=password])").send_keys("admin")
    d.find_element("css selector", "input[type=password]").send_keys(server.logins["admin"])
    d.find_element("css selector", "button[type=submit]").click()
    _wait_for(d, lambda: "Erasure evidence report" in _text(d), "the report after login", timeout=60)


def _requests_tables(cat) -> dict[str, Path]:
    """Every table of the catalog with the requests table's columns -> its directory."""
    out = {}
    for ns in cat.list_namespaces():
        for ident in cat.list_tables(ns):
            tbl = cat.load_table(ident)
            if {"request_id", "subject_key", "status"} <= set(tbl.schema().column_names):
                out[".".join(ident)] = Path(tbl.location().removeprefix("file://"))
    return out


def test_no_requests_table_holds_any_key_the_demo_submitted(server, tmp_path):
    """Every file under every requests table (data and delete files, manifests and manifest lists
    decompressed, metadata JSON, files no snapshot references) is byte-scanned for every key the demo
    submitted (the examples' ``DEMO_SUBJECTS`` and the late request's): 0 found, every request
    ``redacted``. Positive control: the same scan of a copy of a requests table with one more Parquet
    file (zstd-compressed, referenced by no snapshot) holding the keys finds each key there, and only there."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog

    lake = server.work / "lake"
    cat = SqlCatalog("lakehouse", uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=f"file://{lake / 'warehouse'}")
    keys = demo.demo_subject_keys()
    assert demo.OVERDUE_SUBJECT in keys and {"cust-0003", "cust-0007"} <= keys, keys
    tables = _requests_tables(cat)
    assert set(tables) == {"erasure.requests", "erasure_daily.requests"}, tables
    for name, location in tables.items():
        kinds = scanned_files(location)
        assert kinds.get("parquet") and kinds.get("avro") and kinds.get("json"), (name, kinds)
        assert files_holding(location, keys) == {}, name
        rows = cat.load_table(name).scan(selected_fields=("request_id", "status")).to_arrow().to_pylist()
        assert {r["status"] for r in rows} == {"redacted"}, (name, rows)
    late = cat.load_table("erasure.requests").scan(selected_fields=("request_id",)).to_arrow()
    assert demo.OVERDUE_REQUEST_ID in late.column("request_id").to_pylist()
    control = tmp_path / "requests-copy"
    shutil.copytree(tables["erasure.requests"], control)
    planted = control / "data" / "planted.parquet"
    pq.write_table(pa.table({"subject_key": sorted(keys)}), planted, compression="zstd")
    assert files_holding(control, keys) == {k: ["data/planted.parquet"] for k in keys}


def test_dark_mode_follows_airflow(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/tables/gates.orders_eu")
    d.execute_script("localStorage.setItem('chakra-ui-color-mode', 'dark')")
    try:
        d.get(f"{browser.base}/governance/tables/gates.orders_eu")
        bg = d.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(26, 32, 44)", bg
        _shot(d, "governance-table-dark.png")
    finally:
        d.execute_script("localStorage.removeItem('chakra-ui-color-mode')")
