"""Governance view (#17) in a real browser: Debian's Chromium (headless, via chromedriver and selenium)
against ``airflow api-server`` on 127.0.0.1 with the SimpleAuthManager.

One module-scoped API server and browser. The test logs in through Airflow's login form, opens the
Governance entry inside the Airflow UI and each governance page, asserts what a person looks for, and
saves screenshots under ``docs/images/``. It also opens the XCom view of a tag task run by
``airflow dags test`` to see whether the 64-bit snapshot id reaches the screen exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from _servers import _stop_process, _wait, free_ports, skip_or_fail
from _ui_helpers import SUBJECTS, fill_lake
from conftest import ROOT, catalog_conn_json, pristine_airflow_db

pytestmark = pytest.mark.airflow

IMAGES = ROOT / "docs" / "images"
USER, PASSWORD = "officer", "officer-pw-1234"
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
from airflow_iceberg_provider.operators.wap import IcebergWapPublishOperator

with DAG("ui_xcom", start_date=datetime(2026, 1, 1), schedule=None, catchup=False):
    tag = IcebergCreateTagOperator(task_id="tag", table="db.orders", tag="xcom-check")
    # already published by fill_lake: a no-op publish whose extra link Airflow computes on the worker
    tag >> IcebergWapPublishOperator(task_id="publish", table="db.orders", branch="wap_ok")
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_bin):
        skip_or_fail("chromium / chromium-driver are not installed (scripts/bootstrap.sh installs them)")
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.ui.reader import clear_caches

    tmp = tmp_path_factory.mktemp("ui_browser")
    home, dags = tmp / "airflow", tmp / "dags"
    home.mkdir()
    dags.mkdir()
    (tmp / "wh").mkdir()
    shutil.copy(pristine_airflow_db(), home / "airflow.db")
    (dags / "ui_xcom.py").write_text(DAG)
    (tmp / "pw.json").write_text(json.dumps({USER: PASSWORD}))
    (port,) = free_ports(1)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp / "pw.json"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": "ui-browser-jwt-secret-" + "y" * 48,
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": catalog_conn_json(tmp / "catalog.db", tmp / "wh"),
    }
    old = os.environ.get("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT")
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"]
    clear_caches()
    try:
        ids = fill_lake(IcebergCatalogHook())
    finally:
        if old is None:
            os.environ.pop("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = old
    dag_run = subprocess.run(
        ["airflow", "dags", "test", "ui_xcom", "2026-01-01T00:00:00+00:00"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp,
    )
    assert dag_run.returncode == 0, (dag_run.stdout + dag_run.stderr)[-3000:]
    log = tmp / "api-server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["airflow", "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp,
        )
    base = f"http://127.0.0.1:{port}"
    driver = None
    try:
        _wait(
            lambda: urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2).status == 200,
            timeout=120,
            what="airflow api-server",
            proc=proc,
            log=log,
        )
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for flag in (*CHROME_FLAGS, f"--user-data-dir={tmp / 'chrome-profile'}"):
            opts.add_argument(flag)
        driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
        driver.set_page_load_timeout(60)
        IMAGES.mkdir(parents=True, exist_ok=True)
        yield SimpleNamespace(base=base, driver=driver, ids=ids, env=env, log=log)
    finally:
        if driver is not None:
            driver.quit()
        _stop_process(proc)
        clear_caches()


def _text(driver) -> str:
    return driver.find_element("tag name", "body").text


def _wait_for(driver, predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{what} not seen within {timeout:.0f}s; page text:\n{_text(driver)[:2000]}")


def _shot(driver, name: str) -> None:
    height = driver.execute_script("return Math.min(document.body.scrollHeight, 4000)")
    driver.set_window_size(1400, max(int(height or 0) + 40, 800))
    driver.save_screenshot(str(IMAGES / name))
    driver.set_window_size(1400, 1000)


@pytest.fixture(scope="module")
def browser(server):
    """The browser after logging in through Airflow's own login form."""
    d = server.driver
    d.get(f"{server.base}/governance/")
    assert "Not authenticated" in _text(d)  # no session: no data
    d.get(f"{server.base}/")
    _wait_for(d, lambda: len(d.find_elements("css selector", "input[type=password]")) == 1, "the login form")
    user_box = d.find_element("css selector", "input:not([type=password])")
    user_box.send_keys(USER)
    d.find_element("css selector", "input[type=password]").send_keys(PASSWORD)
    d.find_element("css selector", "button[type=submit]").click()
    _wait_for(d, lambda: d.get_cookie("_token") is not None, "the session cookie after login")
    return server


def test_governance_entry_inside_the_airflow_ui(browser):
    d = browser.driver
    d.get(f"{browser.base}/plugin/iceberg-governance")
    _wait_for(d, lambda: d.find_elements("css selector", "iframe"), "the Governance plugin frame")
    _wait_for(d, lambda: "Governance" in _text(d), "the Governance nav entry")
    d.switch_to.frame(d.find_element("css selector", "iframe"))
    _wait_for(d, lambda: "db.orders" in _text(d), "the tables page inside the frame")
    d.switch_to.default_content()
    _shot(d, "governance-in-airflow.png")


def test_tables_page(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/")
    text = _text(d)
    assert "Governed tables" in text and "db.orders" in text and "failed 1" in text
    assert str(browser.ids["published"]) in text  # last publish, exact 64-bit id
    assert "2 open erasure request(s)" in text
    _shot(d, "governance-tables.png")


def test_table_detail_shows_the_failed_check_and_its_observed_value(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/tables/db.orders")
    failed_rows = d.find_elements("css selector", ".audit.failed tr.fail")
    assert failed_rows, _text(d)[:1500]
    cells = [c.text for c in failed_rows[0].find_elements("tag name", "td")]
    assert cells[0] == "min_rows" and cells[3] == "3" and cells[4] == ">= 100" and cells[5] == "FAIL"
    observed = failed_rows[0].find_element("css selector", "td.observed")
    assert observed.value_of_css_property("background-color") == "rgba(255, 235, 238, 1)"  # highlighted
    text = _text(d)
    assert "legal-hold-case-7" in text and "release-1" in text and str(browser.ids["bad"]) in text
    assert d.find_element("css selector", "svg[aria-label='snapshot timeline']").is_displayed()
    assert d.find_element("css selector", "svg[aria-label='health before and after maintenance']").is_displayed()
    _shot(d, "governance-table.png")
    # the ledger filter, driven like a person does it
    from selenium.webdriver.support.ui import Select

    Select(d.find_element("css selector", "#ledger-filter select[name=operation]")).select_by_visible_text(
        "wap_publish"
    )
    d.find_element("css selector", "#ledger-filter button").click()
    _wait_for(d, lambda: "operation=wap_publish" in d.current_url, "the filtered ledger")
    ops = {r.find_elements("tag name", "td")[1].text for r in d.find_elements("css selector", "#ledger-rows tbody tr")}
    assert ops == {"wap_publish"}


def test_erasure_page_and_printable_evidence_report(browser):
    d = browser.driver
    d.get(f"{browser.base}/governance/erasure")
    row = d.find_element("css selector", "tr[data-request='R-300']")
    assert "overdue" in row.text and "fail" in row.get_attribute("class")
    _shot(d, "governance-erasure.png")
    d.find_element("css selector", "tr[data-request='R-100'] a").click()
    _wait_for(d, lambda: "Erasure evidence report" in _text(d), "the evidence report")
    text = _text(d)
    assert "R-100" in text and "Rows removed 4" in text and "verified" in text
    _shot(d, "governance-evidence-report.png")
    pdf = d.print_page()  # what "Print / save as PDF" produces
    assert len(pdf) > 1000
    for subject in SUBJECTS.values():
        assert subject not in d.page_source


def _api(browser, path: str):
    req = urllib.request.Request(
        f"{browser.base}/api/v2/{path}", headers={"Cookie": f"_token={browser.driver.get_cookie('_token')['value']}"}
    )
    return json.load(urllib.request.urlopen(req))


def test_publish_task_extra_link_computed_by_airflow_opens_the_timeline(browser):
    d = browser.driver
    run_id = _api(browser, "dags/ui_xcom/dagRuns?limit=1")["dag_runs"][0]["dag_run_id"]
    try:
        links = _api(browser, f"dags/ui_xcom/dagRuns/{run_id}/taskInstances/publish/links")
    except urllib.error.HTTPError as err:
        tis = _api(browser, f"dags/ui_xcom/dagRuns/{run_id}/taskInstances")["task_instances"]
        raise AssertionError(
            f"extra links of the publish task: {err.code} {err.read()[:300]!r}; run {run_id} has "
            f"{[(t['task_id'], t['state']) for t in tis]}"
        ) from err
    url = links["extra_links"]["Governance: table timeline"]
    assert url.startswith(f"{browser.base}/governance/tables/db.orders?") and "task_id=publish" in url
    d.get(url)
    assert "Snapshot timeline" in _text(d) and d.find_element("css selector", "svg[aria-label='snapshot timeline']")


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
    """Reports what the XCom view shows for the tag task's snapshot id (string ids: #20)."""
    d = browser.driver
    req = urllib.request.Request(
        f"{browser.base}/api/v2/dags/ui_xcom/dagRuns?limit=1",
        headers={"Cookie": f"_token={d.get_cookie('_token')['value']}"},
    )
    run_id = json.load(urllib.request.urlopen(req))["dag_runs"][0]["dag_run_id"]
    req = urllib.request.Request(
        f"{browser.base}/api/v2/dags/ui_xcom/dagRuns/{run_id}/taskInstances/tag/xcomEntries/return_value",
        headers={"Cookie": f"_token={d.get_cookie('_token')['value']}"},
    )
    stored = json.load(urllib.request.urlopen(req))["value"]
    exact = str(browser.ids["published"])
    d.get(f"{browser.base}/dags/ui_xcom/runs/{quote(run_id, safe='')}/tasks/tag/xcom")
    try:
        _wait_for(d, lambda: "return_value" in _text(d), "the XCom view", timeout=45)
        _expand_json(d)
        _wait_for(d, lambda: "snapshot_id" in _text(d), "the expanded XCom value", timeout=15)
    finally:
        _shot(d, "xcom-snapshot-id.png")
    time.sleep(1)
    _shot(d, "xcom-snapshot-id.png")
    text = _text(d)
    print(f"XCom stored snapshot_id={stored.get('snapshot_id')!r}; exact id {exact} on screen: {exact in text}")
    assert isinstance(stored.get("snapshot_id"), str), "snapshot ids in XCom must be decimal strings (#20)"
    assert exact in text
