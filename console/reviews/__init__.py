"""The reviewer's pages: review queues, "review next", and a run to label and make a case of."""
