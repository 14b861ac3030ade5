"""The Tideline view as an Airflow plugin: its FastAPI app at /tideline (page, JSON API,
Prometheus metrics) and a "Tideline" entry in the UI's navigation that shows the page inside
Airflow. Airflow finds it by the wheel's `airflow.plugins` entry point, or, from a checkout, by
plugins/tideline_view.py in its plugins folder."""
from airflow.plugins_manager import AirflowPlugin

from tideline.view.app import create_app


class TidelineViewPlugin(AirflowPlugin):
    name = "tideline"
    fastapi_apps = [{"name": "tideline", "app": create_app(), "url_prefix": "/tideline"}]
    external_views = [{"name": "Tideline", "href": "/tideline/", "url_route": "tideline", "destination": "nav",
                       "icon": "/tideline/static/tideline.svg"}]
