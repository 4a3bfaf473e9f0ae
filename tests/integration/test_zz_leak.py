import time, pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from tests.integration.test_localcluster_basic import pod, wait_for

def test_a(local_cluster):
    v1 = client.CoreV1Api(local_cluster.api_client())
    created = v1.create_namespaced_pod("default", pod("p1", gpus=2))
    running = wait_for(lambda: (p := v1.read_namespaced_pod("p1", "default")).status.phase == "Running" and p)

def test_b(local_cluster):
    v1 = client.CoreV1Api(local_cluster.api_client())
    created = v1.create_namespaced_pod("default", pod("p1", gpus=2))
    time.sleep(0.5)
    v1.delete_namespaced_pod("p1", "default")
    wait_for(lambda: not v1.list_namespaced_pod("default").items)
