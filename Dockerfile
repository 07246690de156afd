# The image every pod of the kubernetes backend runs: Python 3.11, the pinned packages of pyproject.toml in
# /opt/pscluster/.venv (installed by roles/bootstrap.sh, as on any host), and the project at /opt/pscluster.
#   docker build -t registry.example.com/team/pscluster:0.1.0 .
#   docker push registry.example.com/team/pscluster:0.1.0
# then name it in cluster.json ("kubernetes": {"image": ...}) and run `sh run.sh cluster.json`.
# GPU workers: docker build --build-arg TF_PACKAGE='tensorflow[and-cuda]==2.21.0' ...
FROM python:3.11-slim
ARG TF_PACKAGE=
WORKDIR /opt/pscluster
COPY pyproject.toml ./
COPY roles/bootstrap.sh roles/
RUN PSCLUSTER_TF_PACKAGE="$TF_PACKAGE" PYTHON=python3.11 sh roles/bootstrap.sh run && rm -rf /root/.cache/pip
COPY . .
ENV PATH=/opt/pscluster/.venv/bin:/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1
# The pod's command names the task (see `python -m roles.launch jobset`); this default shows the options.
CMD [".venv/bin/python", "-m", "roles.launch", "--help"]
