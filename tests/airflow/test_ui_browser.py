"""Governance view in a real browser: Debian's Chromium (headless, via chromedriver and selenium) against
the Airflow UI that ``make ui`` starts (``scripts/ui.sh``: API server, scheduler, DAG processor and
triggerer on 127.0.0.1) with three logins of a real auth manager (``tests.support.dag_limited_auth``: the
SimpleAuthManager plus per-DAG limits): ``admin``; ``auditor``, who may read every DAG but lacks the
erasure permission; ``limited``, who may read only ``orders_wap``.

One ``scripts/ui.sh`` per module, over an Airflow home and a catalog laid out as ``make demo`` leaves
them (``$AIP_WORK/lake/catalog.db``, task logs written by the demo's own ``write_task_logs``); the
governance rows are written with pyiceberg (``tests.support.ui.fill_lake``), no Spark. The test logs in
through Airflow's login form like a person, opens the pages, asserts what a person looks for, and saves
screenshots under ``.work/screenshots/`` (ignored by git; ``make docs-images`` writes them to
``docs/images/`` instead).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest

from tests.support.lake import ROOT, catalog_conn_json, pristine_airflow_db
from tests.support.servers import _wait, free_ports, skip_or_fail
from tests.support.ui import ROLES, SUBJECTS, auth_env, fill_lake

pytestmark = pytest.mark.airflow

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
DAG = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator

with DAG("ui_xcom", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    tag = IcebergCreateTagOperator(task_id="tag", table="db.orders", tag="xcom-check")
    # already published by fill_lake: a no-op publish whose extra link Airflow computes on the worker (no audit
    # of this run to bind: the no-op says so deliberately)
    tag >> IcebergWapPublishOperator(task_id="publish", table="db.orders", branch="wap_ok", require_audit=False)
"""
#: Names the test process may carry that would point ``make ui`` elsewhere than the module's demo layout.
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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_bin):
        skip_or_fail("chromium / chromium-driver are not installed (scripts/bootstrap.sh installs them)")
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.ui.reader import clear_caches

    tmp = tmp_path_factory.mktemp("ui_browser")
    work, home, dags = tmp / "work", tmp / "work" / "airflow", tmp / "dags"
    lake = work / "lake"
    for d in (home, dags, lake / "warehouse"):
        d.mkdir(parents=True)
    shutil.copy(pristine_airflow_db(), home / "airflow.db")
    (dags / "ui_xcom.py").write_text(DAG)
    conn = catalog_conn_json(lake / "catalog.db", lake / "warehouse")
    old = os.environ.get("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT")
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = conn
    clear_caches()
    try:
        ids = fill_lake(IcebergCatalogHook())
    finally:
        if old is None:
            os.environ.pop("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = old
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN}
    env.update(auth_env())
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = ",".join(
        f"{u}:{ROLES[u]}" for u in ("admin", "auditor", "limited")
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT / "tests")) if p)
    env.update(
        AIP_WORK=str(work),
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
    )
    (port,) = free_ports(1)
    env["AIP_UI_PORT"] = str(port)
    # a demo run: `airflow dags test`, then the demo's own step that puts the task logs where the UI reads them
    run_env = {
        **env,
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": conn,
        "AIRFLOW__API_AUTH__JWT_SECRET": "ui-browser-jwt-secret-" + "y" * 48,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
    }
    dag_run = subprocess.run(
        ["airflow", "dags", "test", "ui_xcom", "2026-01-01T00:00:00+00:00"],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp,
    )
    out = dag_run.stdout + dag_run.stderr
    assert dag_run.returncode == 0, out[-3000:]
    keep = subprocess.run(
        [sys.executable, "-c", "import sys, demo; out = sys.stdin.read(); demo.keep_task_logs('ui_xcom', out)"],
        input=out,
        env={**run_env, "PYTHONPATH": str(ROOT / "scripts")},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp,
    )
    assert keep.returncode == 0 and "not written" not in keep.stdout, keep.stdout + keep.stderr
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
            base=base, driver=driver, ids=ids, env=env, log=log, printed=printed, logins=logins, work=work, tmp=tmp
        )
    finally:
        if driver is not None:
            driver.quit()
        _stop_group(proc)
        clear_caches()


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


def test_make_ui_prints_url_and_logins_over_the_demo_catalog(browser):
    text = browser.printed
    assert f"Airflow UI (the demo's runs, notes, task logs, extra links): {browser.base}" in text
    assert set(browser.logins) == {"admin", "auditor", "limited"}
    assert all(len(p) >= 12 for p in browser.logins.values())
    assert f"catalog {browser.work}/lake" in text
    d = browser.driver
    d.get(f"{browser.base}/governance/")
    assert "db.orders" in _text(d) and "cannot be read" not in _text(d)  # the demo layout's catalog


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
    _wait_for(d, lambda: "db.orders" in _text(d), "the tables page inside the frame")
    d.switch_to.default_content()
    _shot(d, "governance-in-airflow.png")


def test_tables_page_shows_a_health_verdict(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/")
    text = _text(d)
    assert "Governed tables" in text and "db.orders" in text and "failed 1" in text
    assert str(browser.ids["published"]) in text  # last publish, exact 64-bit id
    cell = d.find_element("css selector", "tr[data-table='db.orders'] td.verdict")
    # the planner's verdict: small test files are no incident, so green or amber, never red
    assert cell.get_attribute("data-verdict") in ("healthy", "needs maintenance")
    badge = cell.find_element("css selector", ".badge")
    assert badge.text == cell.get_attribute("data-verdict")
    assert badge.value_of_css_property("background-color") != "rgba(0, 0, 0, 0)"  # coloured
    assert "2 open erasure request(s)" in text
    _shot(d, "governance-tables.png")


def test_table_detail_shows_the_failed_check_and_links_back_to_airflow(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/tables/db.orders")
    failed_rows = d.find_elements("css selector", ".audit.failed tr.fail")
    assert failed_rows, _text(d)[:1500]
    cells = [c.text for c in failed_rows[0].find_elements("tag name", "td")]
    assert cells[0] == "min_rows" and cells[3] == "3" and cells[4] == ">= 100" and cells[5] == "FAIL"
    text = _text(d)
    assert "legal-hold-case-7" in text and "release-1" in text and str(browser.ids["bad"]) in text
    assert d.find_element("css selector", "svg[aria-label='snapshot timeline']").is_displayed()
    assert d.find_element("css selector", "svg[aria-label='what each maintenance action did']").is_displayed()
    assert "rewritten data files" in text
    link = d.find_element("css selector", "a.af-task[href*='/tasks/publish']")
    assert link.get_attribute("target") == "_top"
    assert d.execute_script("return document.documentElement.scrollWidth") <= 1400  # long names wrap
    _shot(d, "governance-table.png")


def test_evidence_report_of_a_request_that_matched_nothing(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/erasure")
    row = d.find_element("css selector", "tr[data-request='R-300']")
    assert "overdue" in row.text and "fail" in row.get_attribute("class")
    erased = d.find_element("css selector", "tr[data-request='R-100'] td.erased-at").text
    assert erased.endswith("UTC")
    _shot(d, "governance-erasure.png")
    d.find_element("css selector", "tr[data-request='R-400'] a[href*='/report']").click()
    _wait_for(d, lambda: "Erasure evidence report" in _text(d), "the evidence report")
    text = _text(d)
    assert "matched no row" in text
    assert d.find_element("css selector", "td.rows-found").text == "0"
    assert d.find_element("css selector", "td.rows-removed").text == "0"
    runs = d.find_element("css selector", "td.runs").text
    assert "erasure_daily › erase_orders" in runs and "erasure_nightly › purge_orders" in runs
    assert "Files rewritten (batch)" in text and "Ref policy" not in text
    logical = d.find_element("css selector", "td.phase-runs[data-role='logical']").text
    purge = d.find_element("css selector", "td.phase-runs[data-role='purge']").text
    assert "erasure_daily › erase_orders" in logical and "erasure_nightly › purge_orders" in purge
    assert len(d.find_elements("css selector", ".deadline")) == 2
    _shot(d, "governance-evidence-report.png")
    assert len(d.print_page()) > 1000  # what "Print / save as PDF" produces
    for subject in SUBJECTS.values():
        assert subject not in d.page_source
    # the overdue request's report shows its deadlines, past due
    d.get(f"{browser.base}/governance/erasure/R-300/report")
    assert len(d.find_elements("css selector", ".deadline[data-overdue='true']")) == 2
    # the erased table declares no subject columns: the erasure map flags it
    d.get(f"{browser.base}/governance/erasure-map")
    assert "declares no subject columns" in d.find_element("css selector", "li[data-undeclared='db.orders']").text


def _api(browser, path: str):
    req = urllib.request.Request(
        f"{browser.base}/api/v2/{path}", headers={"Cookie": f"_token={browser.driver.get_cookie('_token')['value']}"}
    )
    return json.load(urllib.request.urlopen(req))


def _link(op, dag_id: str, run_id: str, task_id: str, base: str) -> str:
    os.environ["AIRFLOW__API__BASE_URL"] = base
    try:
        (lnk,) = op.operator_extra_links
        return lnk.get_link(op, ti_key=SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id))
    finally:
        os.environ.pop("AIRFLOW__API__BASE_URL", None)


def test_publish_link_shows_the_audit_that_gated_it(browser):
    d = browser.driver
    run_id = _api(browser, "dags/ui_xcom/dagRuns?limit=1")["dag_runs"][0]["dag_run_id"]
    links = _api(browser, f"dags/ui_xcom/dagRuns/{run_id}/taskInstances/publish/links")
    url = links["extra_links"]["Governance: table timeline"]
    # computed by Airflow on the worker: the page opens inside Airflow's navigation ([api] base_url as prefix when set)
    assert url.removeprefix(browser.base).startswith("/plugin/iceberg-governance/governance/tables/db.orders?")
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator

    publish = IcebergWapPublishOperator(task_id="publish", table="db.orders", branch="wap_ok")
    d.get(_link(publish, "orders_wap", "manual__ui", "publish", browser.base))
    _framed(d)
    _wait_for(d, lambda: "Snapshot timeline" in _text(d), "the table page in the frame")
    assert d.find_element("id", "highlighted").text == str(browser.ids["published"])
    assert "gated the publish" in d.find_element("id", "gating-audit").text
    observed = [c.text for c in d.find_elements("css selector", "td.observed")]
    assert "150" in observed and "3" not in observed
    d.switch_to.default_content()
    _shot(d, "governance-publish-link.png")


def test_erasure_link_lists_only_that_tasks_requests(browser):
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator

    d = browser.driver
    erase = IcebergErasureOperator(
        task_id="purge_orders", table="db.orders", subject_columns="customer_id", requests_table="db.requests"
    )
    d.get(_link(erase, "erasure_nightly", "scheduled__night", "purge_orders", browser.base))
    _framed(d)
    _wait_for(d, lambda: d.find_elements("id", "task-filter"), "the filtered erasure page")
    shown = {r.get_attribute("data-request") for r in d.find_elements("css selector", "#requests tr[data-request]")}
    assert shown == {"R-100", "R-400"}
    d.switch_to.default_content()
    d.get(_link(erase, "erasure", "manual__refused", "erase_orders", browser.base))
    _framed(d)
    _wait_for(d, lambda: d.find_elements("css selector", ".refusal"), "the refusal")
    assert "tag release-1 keeps rows" in _text(d)
    assert not d.find_elements("css selector", "#requests tr[data-request]")


def test_task_log_of_a_demo_run_is_visible(browser):
    d = browser.driver
    run_id = _api(browser, "dags/ui_xcom/dagRuns?limit=1")["dag_runs"][0]["dag_run_id"]
    d.get(f"{browser.base}/dags/ui_xcom/runs/{quote(run_id, safe='')}/tasks/tag")
    _wait_for(d, lambda: "xcom-check" in _text(d), "the tag task's log", timeout=90)
    text = _text(d)
    assert "Could not read served logs" not in text
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
    run_id = _api(browser, "dags/ui_xcom/dagRuns?limit=1")["dag_runs"][0]["dag_run_id"]
    stored = _api(browser, f"dags/ui_xcom/dagRuns/{run_id}/taskInstances/tag/xcomEntries/return_value")["value"]
    assert isinstance(stored.get("snapshot_id"), str), "snapshot ids in XCom must be decimal strings"
    exact = str(browser.ids["published"])
    d.get(f"{browser.base}/dags/ui_xcom/runs/{quote(run_id, safe='')}/tasks/tag/xcom")
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
        for path in ("/governance/erasure", "/governance/erasure/R-100/report", "/governance/approvals"):
            d.get(f"{server.base}{path}")
            assert "Not allowed" in _text(d), path
            assert "R-100" not in d.page_source and "R-400" not in d.page_source, path
        token = d.get_cookie("_token")["value"]
        for path in ("/governance/api/erasure", "/governance/api/erasure/R-100"):
            req = urllib.request.Request(f"{server.base}{path}", headers={"Cookie": f"_token={token}"})
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req)
            assert err.value.code == 403 and b"R-100" not in err.value.read()
        d.get(f"{server.base}/governance/tables/db.orders")
        assert "min_rows" in _text(d)  # audits stay readable
        req = urllib.request.Request(
            f"{server.base}/governance/api/tables/db.orders", headers={"Cookie": f"_token={token}"}
        )
        body = urllib.request.urlopen(req).read().decode()
        for data in ("R-100", "R-400", "job-ui-purge", "approval-ui-1", "erasure"):
            assert data not in body and data not in d.page_source, data
        _shot(d, "governance-viewer-table.png")
    finally:
        _login(server, "admin")


def test_user_limited_to_some_dags_sees_only_their_rows(server, browser):
    """limited may read orders_wap only: its audits and publish show, the maintenance DAG's and the
    ui_xcom DAG's rows do not (the admin, above, sees all of them)."""
    d = server.driver
    d.get(f"{server.base}/governance/tables/db.orders")
    admin_text = _text(d)
    assert "orders_maintenance" in admin_text and "ui_xcom" in admin_text  # control
    _login(server, "limited")
    try:
        d.get(f"{server.base}/governance/tables/db.orders")
        text = _text(d)
        assert "min_rows" in text and "orders_wap" in text
        assert "orders_maintenance" not in d.page_source and "ui_xcom" not in d.page_source
        assert not d.find_elements("css selector", "a[href*='/erasure']")
        _shot(d, "governance-limited-table.png")
    finally:
        _login(server, "admin")


def test_logged_out_visit_goes_to_the_login_and_back(server, browser):
    d = server.driver
    d.delete_all_cookies()
    target = f"{server.base}/governance/erasure/R-400/report"
    d.get(target)
    _wait_for(d, lambda: len(d.find_elements("css selector", "input[type=password]")) == 1, "the login page")
    assert '"detail"' not in d.page_source  # not raw JSON
    d.find_element("css selector", "input:not([type=password])").send_keys("admin")
    d.find_element("css selector", "input[type=password]").send_keys(server.logins["admin"])
    d.find_element("css selector", "button[type=submit]").click()
    _wait_for(d, lambda: "Erasure evidence report" in _text(d), "the report after login", timeout=60)


def test_dark_mode_follows_airflow(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/tables/db.orders")
    d.execute_script("localStorage.setItem('chakra-ui-color-mode', 'dark')")
    try:
        d.get(f"{browser.base}/governance/tables/db.orders")
        bg = d.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(26, 32, 44)", bg
        _shot(d, "governance-table-dark.png")
    finally:
        d.execute_script("localStorage.removeItem('chakra-ui-color-mode')")
