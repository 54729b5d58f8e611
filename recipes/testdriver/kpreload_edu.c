// SPDX-License-Identifier: GPL-2.0
/*
 * kpreload_edu: kpreload's test driver for QEMU's "edu" PCI device
 * (vendor 0x1234, device 0x11e8, started with "-device edu").
 *
 * It proves the whole kpreload chain in CI without a GPU: the module is
 * built by dkms into the module cache, matched by its PCI modalias at boot,
 * loaded by /init, and probed. On probe it maps BAR0, reads the edu
 * identification register and reports it:
 *   - one kernel log line: "bound, id 0x010000ed, driver version 1.0.0",
 *   - the read-only sysfs attribute /sys/bus/pci/devices/<bdf>/edu_id,
 *   - a character device per bound device, /dev/kpreload-edu<N> (a misc
 *     device: devtmpfs makes the node), whose read gives
 *     "kpreload-edu <driver version> id 0x010000ed\n". It is what a
 *     container sees through kpreload's CDI spec (kind kpreload.dev/edu),
 *     as a GPU container sees /dev/nvidia<N>.
 * The driver version comes from the build (KPRELOAD_EDU_VERSION), so two
 * versions of the same source can be told apart at run time.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/device.h>
#include <linux/sysfs.h>
#include <linux/io.h>
#include <linux/miscdevice.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/delay.h>

#ifndef KPRELOAD_EDU_VERSION
#define KPRELOAD_EDU_VERSION "0.0.0-unknown"
#endif

#define EDU_VENDOR_ID	0x1234
#define EDU_DEVICE_ID	0x11e8
/* Identification register: 0xRRrr00ed (major, minor, 0x00, 0xed). */
#define EDU_REG_ID	0x00
#define EDU_ID_MAGIC	0xed

struct kpreload_edu {
	void __iomem *bar0;
	u32 id;
	int index;
	char name[32];
	char info[64];
	struct miscdevice misc;
};

static DEFINE_IDA(kpreload_edu_ida);

/*
 * probe_delay_ms makes every probe sleep that long before touching the device,
 * uninterruptibly, as the init of a driver whose GPU never answers blocks:
 * tests use it (kpreload_edu.probe_delay_ms=N on the kernel command line) to
 * prove that such a module cannot hold the boot.
 */
static unsigned int probe_delay_ms;
module_param(probe_delay_ms, uint, 0444);
MODULE_PARM_DESC(probe_delay_ms, "sleep this long in every probe (tests: a device that never answers)");

/* init_errno makes the module's init fail with -init_errno (tests: a driver whose init fails). */
static int init_errno;
module_param(init_errno, int, 0444);
MODULE_PARM_DESC(init_errno, "fail the module's init with this errno (tests)");

static int kpreload_edu_open(struct inode *inode, struct file *file)
{
	/* misc_open set private_data to the miscdevice. */
	struct kpreload_edu *edu = container_of(file->private_data, struct kpreload_edu, misc);

	file->private_data = edu;
	return 0;
}

static ssize_t kpreload_edu_read(struct file *file, char __user *buf,
				 size_t count, loff_t *ppos)
{
	struct kpreload_edu *edu = file->private_data;

	return simple_read_from_buffer(buf, count, ppos, edu->info, strlen(edu->info));
}

static const struct file_operations kpreload_edu_fops = {
	.owner	= THIS_MODULE,
	.open	= kpreload_edu_open,
	.read	= kpreload_edu_read,
	.llseek	= default_llseek,
};

static ssize_t edu_id_show(struct device *dev, struct device_attribute *attr,
			   char *buf)
{
	struct kpreload_edu *edu = dev_get_drvdata(dev);

	if (!edu)
		return -ENODEV;
	return sysfs_emit(buf, "0x%08x\n", edu->id);
}
static DEVICE_ATTR_RO(edu_id);

static struct attribute *kpreload_edu_attrs[] = {
	&dev_attr_edu_id.attr,
	NULL,
};
ATTRIBUTE_GROUPS(kpreload_edu);

static int kpreload_edu_probe(struct pci_dev *pdev,
			      const struct pci_device_id *ent)
{
	struct kpreload_edu *edu;
	int err;

	if (probe_delay_ms) {
		dev_info(&pdev->dev, "probe sleeps %u ms (probe_delay_ms)\n", probe_delay_ms);
		msleep(probe_delay_ms);
	}

	edu = devm_kzalloc(&pdev->dev, sizeof(*edu), GFP_KERNEL);
	if (!edu)
		return -ENOMEM;

	err = pci_enable_device(pdev);
	if (err) {
		dev_err(&pdev->dev, "cannot enable device: %d\n", err);
		return err;
	}
	err = pci_request_region(pdev, 0, KBUILD_MODNAME);
	if (err) {
		dev_err(&pdev->dev, "cannot request BAR0: %d\n", err);
		goto err_disable;
	}
	edu->bar0 = pci_iomap(pdev, 0, 0);
	if (!edu->bar0) {
		dev_err(&pdev->dev, "cannot map BAR0\n");
		err = -ENOMEM;
		goto err_release;
	}

	edu->id = ioread32(edu->bar0 + EDU_REG_ID);
	if ((edu->id & 0xff) != EDU_ID_MAGIC) {
		dev_err(&pdev->dev, "not an edu device, id 0x%08x\n", edu->id);
		err = -ENODEV;
		goto err_unmap;
	}

	edu->index = ida_alloc(&kpreload_edu_ida, GFP_KERNEL);
	if (edu->index < 0) {
		err = edu->index;
		goto err_unmap;
	}
	snprintf(edu->name, sizeof(edu->name), "kpreload-edu%d", edu->index);
	snprintf(edu->info, sizeof(edu->info), "kpreload-edu %s id 0x%08x\n",
		 KPRELOAD_EDU_VERSION, edu->id);
	edu->misc.minor = MISC_DYNAMIC_MINOR;
	edu->misc.name = edu->name;
	edu->misc.fops = &kpreload_edu_fops;
	edu->misc.parent = &pdev->dev;
	edu->misc.mode = 0444;
	err = misc_register(&edu->misc);
	if (err) {
		dev_err(&pdev->dev, "cannot register /dev/%s: %d\n", edu->name, err);
		goto err_ida;
	}

	pci_set_drvdata(pdev, edu);
	dev_info(&pdev->dev, "bound, id 0x%08x, driver version %s\n",
		 edu->id, KPRELOAD_EDU_VERSION);
	dev_info(&pdev->dev, "device node /dev/%s\n", edu->name);
	return 0;

err_ida:
	ida_free(&kpreload_edu_ida, edu->index);
err_unmap:
	pci_iounmap(pdev, edu->bar0);
err_release:
	pci_release_region(pdev, 0);
err_disable:
	pci_disable_device(pdev);
	return err;
}

static void kpreload_edu_remove(struct pci_dev *pdev)
{
	struct kpreload_edu *edu = pci_get_drvdata(pdev);

	misc_deregister(&edu->misc);
	ida_free(&kpreload_edu_ida, edu->index);
	pci_iounmap(pdev, edu->bar0);
	pci_release_region(pdev, 0);
	pci_disable_device(pdev);
	dev_info(&pdev->dev, "unbound\n");
}

static const struct pci_device_id kpreload_edu_ids[] = {
	{ PCI_DEVICE(EDU_VENDOR_ID, EDU_DEVICE_ID) },
	{ 0 }
};
MODULE_DEVICE_TABLE(pci, kpreload_edu_ids);

static struct pci_driver kpreload_edu_driver = {
	.name		= KBUILD_MODNAME,
	.id_table	= kpreload_edu_ids,
	.probe		= kpreload_edu_probe,
	.remove		= kpreload_edu_remove,
	.dev_groups	= kpreload_edu_groups,
};
static int __init kpreload_edu_init(void)
{
	if (init_errno > 0) {
		pr_info("kpreload_edu: init fails with errno %d (init_errno)\n", init_errno);
		return -init_errno;
	}
	return pci_register_driver(&kpreload_edu_driver);
}

static void __exit kpreload_edu_exit(void)
{
	pci_unregister_driver(&kpreload_edu_driver);
}

module_init(kpreload_edu_init);
module_exit(kpreload_edu_exit);

MODULE_DESCRIPTION("kpreload test driver for the QEMU edu PCI device");
MODULE_AUTHOR("kpreload authors");
MODULE_LICENSE("GPL");
MODULE_VERSION(KPRELOAD_EDU_VERSION);
