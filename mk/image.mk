# The container image (issue 11): the project's Dockerfile built with buildah, no Docker engine and
# no registry image. mmdebstrap makes the base from Debian packages (bookworm, python3 3.11,
# python3-venv); buildah builds the Dockerfile on it with PYTHON_IMAGE=that base. buildah's
# storage (vfs) is under $(CACHE)/containers, so a second run or a fresh clone reuses the base and
# the dependency layer and reruns only the steps after the source copy (docs/image.md).
#
# The base's directory and name carry what it is made of: change the package list in
# tools/image/base.sh, then bump IMAGE_BASE_REV. `make image` always runs tools/image/build.sh,
# which does nothing when the build's inputs hash to those of the image it has, and otherwise
# lets buildah's layer cache decide which steps rerun. GROUPOPS_IMAGE tells tests/image which
# image to run.

IMAGE_BASE_REV := r1
IMAGE_BASE_DIR := $(CACHE)/image-base-bookworm-python3.11-$(IMAGE_BASE_REV)
IMAGE_BASE := localhost/groupops-base:bookworm-python3.11-$(IMAGE_BASE_REV)
IMAGE_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
export GROUPOPS_IMAGE := localhost/groupops:$(IMAGE_VERSION)

.PHONY: image image-base image-prereqs

image-prereqs:
	@tools/image/prereqs.sh

image-base: image-prereqs
	@tools/image/base.sh $(IMAGE_BASE) $(IMAGE_BASE_DIR)

image: image-base
	@tools/image/build.sh $(GROUPOPS_IMAGE) $(IMAGE_BASE)

# The image itself is built by the image tests' fixture (tests/image/conftest.py runs `make image`)
# in the shared lane, beside the timed one: `make test` does not wait for the source layers.
TEST_DEPS += image-base
