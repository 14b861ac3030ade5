"""Registers the Tideline view with Airflow: its FastAPI app at /tideline (page, JSON API,
Prometheus metrics) and a "Tideline" entry in the UI's navigation that shows the page inside
Airflow. The code lives in the tideline package (tideline/view/)."""
from airflow.plugins_manager import AirflowPlugin

from tideline.view.app import create_app


class TidelineViewPlugin(AirflowPlugin):
    name = "tideline"
    fastapi_apps = [{"name": "tideline", "app": create_app(), "url_prefix": "/tideline"}]
    external_views = [{"name": "Tideline", "href": "/tideline/", "url_route": "tideline", "destination": "nav",
                       "icon": "/tideline/static/tideline.svg"}]
