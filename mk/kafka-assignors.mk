# Apache Kafka's own assignors (kafka-clients from Maven Central) behind a small Java harness, for
# the differential tests and the side-by-side benchmark. tools/kafka-assignors/build.sh builds it
# into $(CACHE)/kafka-assignors-<hash of its pom.xml and sources>/ only when that directory is
# missing, so after the first build this costs one hash.
.PHONY: kafka-assignors
kafka-assignors:
	tools/kafka-assignors/build.sh >/dev/null

TEST_DEPS += kafka-assignors
